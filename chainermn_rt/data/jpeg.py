"""JPEG decoding for training: only the part of the image a crop needs, at the smallest DCT
scale that still covers the output, resized (triangle filter, antialiased like Pillow's
``BILINEAR``) and mirrored in C, into a uint8 ``(H, W, 3)`` RGB array.

The work is done by ``_jpeg.c``, a thin binding to libjpeg-turbo's libjpeg API (partial
decompression: ``jpeg_crop_scanline``, ``jpeg_skip_scanlines``); the GIL is released meanwhile.

>>> import io, numpy
>>> from PIL import Image
>>> buffer = io.BytesIO()
>>> Image.new("RGB", (64, 48), (200, 30, 90)).save(buffer, "JPEG", quality=95)
>>> data = buffer.getvalue()
>>> header(data)
Header(width=64, height=48, components=3, colorspace=3, progressive=False)
>>> image = decode(data, (16, 16), box=(8, 8, 40, 40), flip=True)
>>> image.shape, image.dtype, int(numpy.abs(image - numpy.array([200, 30, 90])).max()) <= 2
((16, 16, 3), dtype('uint8'), True)
>>> decode(data[:200], (16, 16))
Traceback (most recent call last):
chainermn_rt.data.jpeg.DecodeError: the data ends early (truncated file)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy

from chainermn_rt.data import _jpeg

# Images with more pixels are refused before decoding (decompression bombs): Pillow's limit.
MAX_PIXELS = 89_478_485
# libjpeg's colour spaces (J_COLOR_SPACE) the decoder turns into RGB
GRAYSCALE, RGB, YCBCR = 1, 2, 3
DECODABLE = (GRAYSCALE, RGB, YCBCR)
LIBJPEG_TURBO_VERSION = "{}.{}.{}".format(*divmod(_jpeg.LIBJPEG_TURBO_VERSION_NUMBER // 1000,
                                                  1000), _jpeg.LIBJPEG_TURBO_VERSION_NUMBER % 1000)

DecodeError = _jpeg.DecodeError  # a ValueError with libjpeg's message


class Header(NamedTuple):
    width: int
    height: int
    components: int
    colorspace: int  # GRAYSCALE, RGB, YCBCR; 4 and 5 are CMYK and YCCK
    progressive: bool


def header(data: bytes) -> Header:
    """The image's size and kind, from its markers alone; DecodeError when it is no JPEG."""
    width, height, components, colorspace, progressive = _jpeg.header(data)
    return Header(width, height, components, colorspace, bool(progressive))


def decode(data: bytes, size: tuple[int, int] | None = None,
           box: tuple[float, float, float, float] | None = None, flip: bool = False,
           out: numpy.ndarray | None = None, max_pixels: int = MAX_PIXELS) -> numpy.ndarray:
    """``box`` (x0, y0, x1, y1 in the image's pixels; default: all of it) resized to ``size``
    (width, height; default: the box's own), mirrored left-right when ``flip``, as a uint8
    ``(height, width, 3)`` array, written into ``out`` when given (C-contiguous)."""
    if box is None or size is None:
        w, h = header(data)[:2]
        box = box or (0, 0, w, h)
        size = size or (round(box[2] - box[0]), round(box[3] - box[1]))
    width, height = size
    if out is None:
        out = numpy.empty((height, width, 3), numpy.uint8)
    elif out.shape != (height, width, 3) or out.dtype != numpy.uint8 \
            or not out.flags.c_contiguous:
        raise ValueError(f"out: {out.shape} {out.dtype}; allowed: C-contiguous uint8 "
                         f"({height}, {width}, 3)")
    _jpeg.decode(data, out, height, width, *map(float, box), bool(flip), max_pixels)
    return out
