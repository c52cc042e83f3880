"""ImageNet-like JPEGs made up on the spot, for trying the data path without ImageNet and for
tests and benchmarks: natural-image-like texture (power falling as 1/f) at ImageNet's typical
sizes and quality 90 (about 100 KB at 500x375, as ImageNet's average), with a class-dependent
colour and blob a network can learn.

>>> import io
>>> from PIL import Image
>>> data = image(label=3, index=0, size=(120, 90))
>>> Image.open(io.BytesIO(data)).size
(120, 90)
>>> data == image(label=3, index=0, size=(120, 90))
True
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy

SIZES = ((500, 375), (375, 500), (500, 333), (400, 350), (500, 400))


def image(label: int, index: int, size: tuple[int, int] = (500, 375), quality: int = 90,
          exponent: float = 0.75) -> bytes:
    """A JPEG of ``size`` (width, height) for class ``label``; the same bytes for the same
    arguments."""
    from PIL import Image

    width, height = size
    rng = numpy.random.default_rng([label, index])
    fy = numpy.fft.fftfreq(height)[:, None]
    fx = numpy.fft.rfftfreq(width)[None, :]
    f = numpy.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    planes = []
    for _ in range(3):
        spectrum = (rng.normal(size=f.shape) + 1j * rng.normal(size=f.shape)) / f ** exponent
        plane = numpy.fft.irfft2(spectrum, s=(height, width))
        planes.append((plane - plane.mean()) / (plane.std() + 1e-9))
    texture = numpy.stack(planes, axis=-1) * 26
    colour = numpy.random.default_rng(1000 + label).uniform(60, 200, 3)
    yy, xx = numpy.mgrid[0:height, 0:width]
    cx, cy = rng.uniform(0.3, 0.7) * width, rng.uniform(0.3, 0.7) * height
    radius = min(width, height) * (0.15 + 0.1 * (label % 3))
    blob = (((xx - cx) ** 2 + (yy - cy) ** 2) < radius ** 2)[..., None]
    pixels = numpy.clip(texture + colour + blob * (60 - 40 * (label % 4)), 0, 255)
    out = io.BytesIO()
    Image.fromarray(pixels.astype(numpy.uint8)).save(out, "JPEG", quality=quality)
    return out.getvalue()


def tree(root: Path, classes: int, per_class: int, sizes=SIZES, first: int = 0) -> list[Path]:
    """A class-folder tree ``root/c<NNN>/<class>_<i>.JPEG`` (ImageNet's layout), images
    ``first`` .. ``first + per_class - 1`` of each class; its files."""
    files = []
    for label in range(classes):
        folder = Path(root) / f"c{label:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(first, first + per_class):
            path = folder / f"c{label:03d}_{i}.JPEG"
            path.write_bytes(image(label, i, sizes[(label + i) % len(sizes)]))
            files.append(path)
    return files
