"""The standard ImageNet recipe as boxes to decode: random-resized crop + flip for training,
short side 256 + centre crop 224 for validation; the normalisation constants.

Every random choice comes from the sample's key, the epoch and a seed alone (not from a
process's random state), so a sample looks the same whichever rank or loader worker decodes it,
and a resumed job decodes exactly what an uninterrupted one would.

>>> t = TrainCrop(size=224, seed=0)
>>> box, flip = t.box(500, 375, "n01440764/n01440764_10026", epoch=0)
>>> box == t.box(500, 375, "n01440764/n01440764_10026", epoch=0)[0], box != t.box(
...     500, 375, "n01440764/n01440764_10026", epoch=1)[0]
(True, True)
>>> all(0 <= v <= limit for v, limit in zip(box, (500, 375, 500, 375)))
True
>>> CentreCrop(size=224, resize=256).box(500, 375, "any", epoch=0)
((85.9375, 23.4375, 414.0625, 351.5625), False)
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

# ImageNet's per-channel mean and standard deviation of RGB values 0-255 (the usual constants)
MEAN = (123.675, 116.28, 103.53)
STD = (58.395, 57.12, 57.375)

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in the image's pixels


def sample_random(seed: int, epoch: int, key: str) -> random.Random:
    """A generator for one sample in one epoch, the same on every machine and Python."""
    digest = hashlib.blake2b(f"{seed}\0{epoch}\0{key}".encode("utf-8", "surrogateescape"),
                             digest_size=16).digest()
    return random.Random(int.from_bytes(digest, "little"))


@dataclass(frozen=True)
class TrainCrop:
    """Random-resized crop (area ``scale`` of the image, aspect ``ratio``), resized to
    ``size`` x ``size``, mirrored with probability 1/2 (torchvision's RandomResizedCrop)."""

    size: int = 224
    seed: int = 0
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)

    def box(self, width: int, height: int, key: str, epoch: int) -> tuple[Box, bool]:
        rng = sample_random(self.seed, epoch, key)
        area = width * height
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target = area * rng.uniform(*self.scale)
            aspect = math.exp(rng.uniform(*log_ratio))
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                x, y = rng.randint(0, width - w), rng.randint(0, height - h)
                return (x, y, x + w, y + h), rng.random() < 0.5
        # the whole image, cut to the nearest allowed aspect
        if width / height < self.ratio[0]:
            w, h = width, min(height, round(width / self.ratio[0]))
        elif width / height > self.ratio[1]:
            w, h = min(width, round(height * self.ratio[1])), height
        else:
            w, h = width, height
        x, y = (width - w) // 2, (height - h) // 2
        return (x, y, x + w, y + h), rng.random() < 0.5


@dataclass(frozen=True)
class CentreCrop:
    """The centre ``size`` x ``size`` of the image scaled to a short side of ``resize``."""

    size: int = 224
    resize: int = 256

    def box(self, width: int, height: int, key: str, epoch: int) -> tuple[Box, bool]:
        side = min(width, height) * min(1.0, self.size / self.resize)
        x0, y0 = (width - side) / 2, (height - side) / 2
        return (x0, y0, x0 + side, y0 + side), False
