"""ImageNet-style data for train_imagenet.py: a folder or list file, or synthetic images.

- a folder ``ROOT/<class>/<image>``: classes are the sorted sub-folder names;
- a list file of ``path label`` lines (paths relative to ``--root``), as in Chainer's
  ImageNet example;
- ``SyntheticImages``: class-dependent random images made on the fly, for benchmarks.

Images are read as float32 CHW arrays: ``.npy`` and binary PPM/PGM natively, other
formats (JPEG, PNG ...) through Pillow when it is installed.

Example::

    base = image_list("data/train")                  # [(path, label), ...]
    train = CroppedImages(base, mean, crop=224)      # random crop + flip, mean subtracted
"""

from __future__ import annotations

import os
from pathlib import Path

import chainer
import numpy

from chainermn_rt.errors import UserError

NATIVE = (".npy", ".ppm", ".pgm", ".pnm")
IMAGE_SUFFIXES = (*NATIVE, ".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def image_list(source: str, root: str = "") -> list[tuple[str, int]]:
    """``(path, label)`` pairs from a class-per-folder tree or a ``path label`` list file."""
    path = Path(source)
    if path.is_dir():
        classes = sorted(p.name for p in path.iterdir() if p.is_dir())
        pairs = [(str(f), label) for label, name in enumerate(classes)
                 for f in sorted((path / name).iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    elif path.is_file():
        pairs = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            parts = line.rsplit(None, 1)
            if len(parts) != 2 or not parts[1].isdigit():
                raise UserError(f"{source}:{n}: {line!r}; allowed: 'PATH LABEL' with an "
                                "integer label")
            pairs.append((os.path.join(root, parts[0]), int(parts[1])))
    else:
        raise UserError(f"data {source!r} does not exist; allowed: a folder of class "
                        "folders or a list file of 'PATH LABEL' lines")
    if not pairs:
        raise UserError(f"data {source!r} holds no images; allowed suffixes: "
                        f"{', '.join(IMAGE_SUFFIXES)}")
    return pairs


def read_image(path: str) -> numpy.ndarray:
    """A float32 ``(3, H, W)`` array with values 0-255."""
    suffix = Path(path).suffix.lower()
    if suffix == ".npy":
        array = numpy.load(path).astype(numpy.float32)
        if array.ndim == 3 and array.shape[0] not in (1, 3):  # HWC -> CHW
            array = array.transpose(2, 0, 1)
    elif suffix in (".ppm", ".pgm", ".pnm"):
        array = _read_netpbm(path)
    else:
        try:
            from PIL import Image
        except ImportError:
            raise UserError(f"{path}: reading {suffix} needs Pillow (pip install pillow); "
                            f"allowed without it: {', '.join(NATIVE)}") from None
        with Image.open(path) as image:
            array = numpy.asarray(image.convert("RGB"), numpy.float32).transpose(2, 0, 1)
    if array.ndim == 2:
        array = array[None]
    if array.shape[0] == 1:
        array = numpy.repeat(array, 3, axis=0)
    return numpy.ascontiguousarray(array, numpy.float32)


def _read_netpbm(path: str) -> numpy.ndarray:
    """Binary PPM (P6) or PGM (P5), 8 bit."""
    data = Path(path).read_bytes()
    fields, pos = [], 0
    while len(fields) < 4:
        while data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            pos = data.index(b"\n", pos)
            continue
        end = pos
        while not data[end:end + 1].isspace():
            end += 1
        fields.append(data[pos:end])
        pos = end
    magic, width, height, maxval = fields[0], int(fields[1]), int(fields[2]), int(fields[3])
    if magic not in (b"P5", b"P6") or maxval > 255:
        raise UserError(f"{path}: netpbm {magic.decode(errors='replace')} with maxval {maxval}; "
                        "allowed: binary P5/P6 with 8-bit values")
    channels = 3 if magic == b"P6" else 1
    pixels = numpy.frombuffer(data, numpy.uint8, width * height * channels, pos + 1)
    return pixels.reshape(height, width, channels).transpose(2, 0, 1).astype(numpy.float32)


def write_ppm(path: str, chw: numpy.ndarray) -> None:
    """Write a ``(3, H, W)`` uint8-range array as binary PPM (for generated test data)."""
    _, height, width = chw.shape
    with open(path, "wb") as out:
        out.write(b"P6\n%d %d\n255\n" % (width, height))
        out.write(numpy.clip(chw, 0, 255).astype(numpy.uint8).transpose(1, 2, 0).tobytes())


def compute_mean(pairs, limit: int = 1000) -> numpy.ndarray:
    """The mean image of the first ``limit`` images (all must share one size)."""
    images = [read_image(p) for p, _ in pairs[:limit]]
    shapes = {i.shape for i in images}
    if len(shapes) != 1:
        raise UserError(f"images have sizes {sorted(shapes)}; allowed: one size (resize them "
                        "first, as for Chainer's ImageNet example) or pass --mean")
    return numpy.mean(images, axis=0).astype(numpy.float32)


class CroppedImages(chainer.dataset.DatasetMixin):
    """Mean-subtracted crops scaled to about [-1, 1]: random crop and flip for training,
    the centre crop otherwise."""

    def __init__(self, pairs, mean: numpy.ndarray, crop: int, random: bool = True):
        self.pairs, self.mean, self.crop, self.random = pairs, mean, crop, random

    def __len__(self):
        return len(self.pairs)

    def get_example(self, i):
        path, label = self.pairs[i]
        image = read_image(path)
        if image.shape != self.mean.shape:
            raise UserError(f"{path}: size {image.shape}; allowed: {self.mean.shape} "
                            "(the mean image's size)")
        return _crop(image - self.mean, self.crop, self.random), numpy.int32(label)


class SyntheticImages(chainer.dataset.DatasetMixin):
    """``n`` images of ``size``x``size``; image ``i`` has label ``i % n_class`` and a
    class-dependent colour and stripe pattern under noise (the same on every rank)."""

    def __init__(self, n: int, n_class: int, size: int, crop: int, random: bool = True):
        self.n, self.n_class, self.size, self.crop, self.random = n, n_class, size, crop, random

    def __len__(self):
        return self.n

    def get_example(self, i):
        label = i % self.n_class
        rng = numpy.random.default_rng(i)
        colour = numpy.random.default_rng(1000 + label).uniform(-1, 1, (3, 1, 1))
        stripes = numpy.sin(numpy.arange(self.size) * (label + 1) * numpy.pi / self.size)
        image = colour * stripes[None, :, None] + rng.normal(0, 0.5, (3, self.size, self.size))
        return _crop(image.astype(numpy.float32) * 128, self.crop, self.random), numpy.int32(label)


def _crop(image: numpy.ndarray, crop: int, random: bool) -> numpy.ndarray:
    _, height, width = image.shape
    if crop > min(height, width):
        raise UserError(f"crop {crop} is larger than the images ({height}x{width}); "
                        f"allowed: at most {min(height, width)}")
    if random:
        top, left = (numpy.random.randint(0, d - crop + 1) for d in (height, width))
    else:
        top, left = (height - crop) // 2, (width - crop) // 2
    out = image[:, top:top + crop, left:left + crop]
    if random and numpy.random.randint(2):
        out = out[:, :, ::-1]
    return numpy.ascontiguousarray(out / 128, numpy.float32)
