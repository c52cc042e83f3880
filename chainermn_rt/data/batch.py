"""What a loader hands the trainer, and the converter that puts it on the device: uint8 images
cross to the device (150 KB a 224x224 image, not 602 KB as float32), the conversion to float32
NCHW and ImageNet's normalisation run there. Without the decoder, so a program that only uses
the converter (on synthetic data) runs where the decoder's library is missing.

>>> import chainer, numpy
>>> batch = Batch(numpy.full((2, 4, 4, 3), 124, numpy.uint8), numpy.array([1, 2], numpy.int32))
>>> x, t = to_device(batch, chainer.get_device("@numpy"))
>>> x.shape, x.dtype, round(float(x[0, 0, 0, 0]), 4), t.tolist()
((2, 3, 4, 4), dtype('float32'), 0.0056, [1, 2])
"""

from __future__ import annotations

from dataclasses import dataclass

import chainer
import numpy

from chainermn_rt.data.transforms import MEAN, STD


@dataclass(frozen=True)
class Batch:
    images: numpy.ndarray  # (n, H, W, 3) uint8; shared memory, valid until the next batch
    labels: numpy.ndarray  # (n,) int32

    def __len__(self) -> int:
        return len(self.labels)


@chainer.dataset.converter()
def to_device(batch, device=None):
    """(images as float32 NCHW, normalised with ImageNet's mean and deviation; labels), both
    on ``device``: the conversion runs there. ``batch``: a :class:`Batch`, or a list of
    (uint8 HWC image, label) pairs (a Chainer dataset's)."""
    if not isinstance(batch, Batch):
        batch = Batch(numpy.stack([b[0] for b in batch]),
                      numpy.asarray([b[1] for b in batch], numpy.int32))
    xp = device.xp if device is not None else numpy
    images = device.send(batch.images) if device is not None else batch.images
    labels = device.send(batch.labels) if device is not None else batch.labels
    mean = xp.asarray(MEAN, xp.float32).reshape(1, 3, 1, 1)
    scale = xp.asarray([1 / s for s in STD], xp.float32).reshape(1, 3, 1, 1)
    x = images.transpose(0, 3, 1, 2).astype(xp.float32)
    return (x - mean) * scale, labels
