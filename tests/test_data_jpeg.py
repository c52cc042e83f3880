"""The JPEG decoder (chainermn_rt/data/_jpeg.c) against Pillow, and against damaged input.

Pillow decodes with the same DCT scaling (``draft``) and resizes the box with BILINEAR; the
decoder does the same passes in the other order with 14-bit weights, each pass rounding once,
so they agree within 2 levels (1 seen)."""

from __future__ import annotations

import io
import re
import struct

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from chainermn_rt.data import jpeg
from chainermn_rt.data.writers import synthetic

IMAGES = {  # name -> (JPEG bytes, width, height)
    "420": (synthetic.image(1, 0, (500, 375)), 500, 375),
    "portrait": (synthetic.image(2, 1, (333, 500)), 333, 500),
    "large": (synthetic.image(3, 2, (1000, 750)), 1000, 750),
}


def _encode(pixels, **options) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", **options)
    return out.getvalue()


_RGB = numpy.asarray(Image.open(io.BytesIO(IMAGES["420"][0])).convert("RGB"))
IMAGES["444"] = (_encode(_RGB, quality=92, subsampling=0), 500, 375)
IMAGES["progressive"] = (_encode(_RGB, quality=85, progressive=True), 500, 375)
IMAGES["gray"] = (_encode(_RGB[..., 1], quality=90), 500, 375)


def pillow(data: bytes, width: int, height: int, box, size) -> numpy.ndarray:
    """Pillow's decode at the decoder's DCT scale, then its BILINEAR box resize."""
    bw, bh = box[2] - box[0], box[3] - box[1]
    d = 8
    while d > 1 and (bw / d < size[0] or bh / d < size[1]):
        d //= 2
    image = Image.open(io.BytesIO(data))
    image.draft("RGB", (width // d, height // d))
    sx, sy = image.size[0] / width, image.size[1] / height
    scaled = (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)
    return numpy.asarray(image.convert("RGB").resize(size, Image.BILINEAR, box=scaled))


@st.composite
def crops(draw):
    name = draw(st.sampled_from(sorted(IMAGES)))
    _, width, height = IMAGES[name]
    x0 = draw(st.floats(0, width - 1, allow_nan=False))
    y0 = draw(st.floats(0, height - 1, allow_nan=False))
    x1 = draw(st.floats(x0 + 1, width, allow_nan=False))
    y1 = draw(st.floats(y0 + 1, height, allow_nan=False))
    size = (draw(st.integers(1, 300)), draw(st.integers(1, 300)))
    return name, (x0, y0, x1, y1), size, draw(st.booleans())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crops())
def test_crops_agree_with_pillow(crop):
    name, box, size, flip = crop
    data, width, height = IMAGES[name]
    ours = jpeg.decode(data, size, box, flip)
    want = pillow(data, width, height, box, size)
    if flip:
        want = want[:, ::-1]
    assert ours.shape == (size[1], size[0], 3)
    assert numpy.abs(ours.astype(int) - want).max() <= 2


def test_whole_image_is_pillows_decode_exactly():
    for name in ("420", "444", "progressive", "gray"):
        data, width, height = IMAGES[name]
        want = numpy.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        assert numpy.array_equal(jpeg.decode(data), want), name


def test_header_and_kinds():
    assert jpeg.header(IMAGES["portrait"][0])[:3] == (333, 500, 3)
    assert jpeg.header(IMAGES["progressive"][0]).progressive
    gray = jpeg.decode(IMAGES["gray"][0], (32, 32))
    assert (gray[..., 0] == gray[..., 1]).all() and (gray[..., 1] == gray[..., 2]).all()


def test_writes_into_a_given_buffer_and_checks_it():
    out = numpy.zeros((8, 2, 16, 16, 3), numpy.uint8)
    got = jpeg.decode(IMAGES["420"][0], (16, 16), out=out[3, 1])
    assert got.base is not None and out[3, 1].any() and not out[3, 0].any()
    for bad in (numpy.zeros((16, 16, 3), numpy.float32), numpy.zeros((16, 16, 4), numpy.uint8),
                out[:, 0, 0]):
        with pytest.raises(ValueError, match="out:"):
            jpeg.decode(IMAGES["420"][0], (16, 16), out=bad)


def _with_size(data: bytes, width: int, height: int) -> bytes:
    """The JPEG with its frame header (SOF0/SOF2) claiming another size."""
    at = max(data.find(b"\xff\xc0"), data.find(b"\xff\xc2"))
    return data[:at + 5] + struct.pack(">HH", height, width) + data[at + 9:]


@pytest.mark.parametrize("case, message", [
    ("truncated", "the data ends early"),
    ("empty", "Empty input"),
    ("text", "Not a JPEG file"),
    ("bomb", "30000x30000 pixels, more than the limit"),
    ("cmyk", "(CMYK or YCCK); allowed: RGB or grayscale JPEG"),
    ("box", "is not inside the 500x375 image"),
])
def test_bad_input_is_one_clear_error(case, message):
    data = IMAGES["420"][0]
    box = None
    if case == "truncated":
        data = data[:len(data) // 2]
    elif case == "empty":
        data = b""
    elif case == "text":
        data = b"<html>not an image</html>"
    elif case == "bomb":
        data = _with_size(data, 30000, 30000)
    elif case == "cmyk":
        data = _cmyk()
    elif case == "box":
        box = (0, 0, 600, 375)
    with pytest.raises(jpeg.DecodeError, match=re.escape(message)):
        jpeg.decode(data, (32, 32), box or (0, 0, 400, 300))


def _cmyk() -> bytes:
    out = io.BytesIO()
    Image.fromarray(_RGB).convert("CMYK").save(out, "JPEG", quality=90)
    return out.getvalue()


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_damaged_bytes_never_crash(data):
    """Bytes cut, flipped or overwritten anywhere: an image or DecodeError, nothing else."""
    original = bytearray(IMAGES["444"][0][:20000] if data.draw(st.booleans())
                         else IMAGES["420"][0])
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(original) - 1))
        original[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(original)))
    damaged = bytes(original[:cut])
    try:
        out = jpeg.decode(damaged, (24, 24), (10, 10, 300, 200), data.draw(st.booleans()))
    except jpeg.DecodeError:
        return
    assert out.shape == (24, 24, 3)
