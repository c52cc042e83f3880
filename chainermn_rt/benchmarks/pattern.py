"""The allreduce benchmark's correctness check: a rank-dependent fill whose sum and mean are
known exactly, and a count of the elements that came back wrong.

Rank ``r`` fills element ``i`` with ``i % 8 + r % 4``: small integers, so the sum over
``n`` ranks, ``n * (i % 8) + T(n)`` with ``T(n) = sum(r % 4 for r < n)``, is exact in float32
(up to about 1.6 million ranks); the mean is that sum over ``n``, which the final scaling by
``1/n`` may round by a few units in the last place (``MEAN_RTOL`` allows that, nothing more).
Works on NumPy and CuPy arrays alike, in blocks (no full-size temporaries).

>>> import numpy
>>> bufs = [numpy.empty(10, numpy.float32) for _ in range(3)]
>>> for r, b in enumerate(bufs): fill(b, r)
>>> total = sum(bufs)
>>> count_wrong(total, ranks=3, redop="sum"), count_wrong(total / 3, ranks=3, redop="mean")
(0, 0)
>>> total[7] += 1                       # one corrupted element
>>> count_wrong(total, ranks=3, redop="sum")
1
"""

from __future__ import annotations

PERIOD = 8  # the pattern repeats every PERIOD elements
RANK_VALUES = 4  # rank r adds r % RANK_VALUES
BLOCK = 1 << 22  # elements per block (16 MiB of float32); a multiple of PERIOD
MEAN_RTOL = 2.0 ** -22  # 4 float32 ulps: two roundings (1/n, the product) and a margin
REDOPS = ("sum", "mean")


def _xp(array):
    """numpy for a NumPy array, else cupy."""
    import numpy

    if isinstance(array, numpy.ndarray):
        return numpy
    import cupy

    return cupy


def rank_offset(rank: int) -> int:
    return rank % RANK_VALUES


def offsets_sum(ranks: int) -> int:
    """``T(n)``: the rank offsets of ranks ``0 .. n-1`` added up.

    >>> [offsets_sum(n) for n in (1, 2, 3, 4, 5, 8)]
    [0, 1, 3, 6, 6, 12]
    """
    full, rest = divmod(ranks, RANK_VALUES)
    return full * sum(range(RANK_VALUES)) + sum(range(rest))


def _template(xp, size: int):
    return (xp.arange(size, dtype=xp.int64) % PERIOD).astype(xp.float64)


def fill(buf, rank: int) -> None:
    """Write rank ``rank``'s pattern into the 1-D array ``buf`` (any float dtype)."""
    xp = _xp(buf)
    template = _template(xp, min(BLOCK, buf.size)) + rank_offset(rank)
    for start in range(0, buf.size, BLOCK):
        block = buf[start:start + BLOCK]
        block[...] = template[:block.size]


def count_wrong(buf, ranks: int, redop: str) -> int:
    """Elements of ``buf`` that differ from the ``redop`` ("sum" or "mean") over ``ranks``
    ranks of their patterns: sums must be exact, means within ``MEAN_RTOL``."""
    if redop not in REDOPS:
        raise ValueError(f"redop {redop!r}; allowed: {', '.join(REDOPS)}")
    xp = _xp(buf)
    template = _template(xp, min(BLOCK, buf.size))
    if redop == "sum":
        want, rtol = template * ranks + offsets_sum(ranks), 0.0
    else:
        want, rtol = template + offsets_sum(ranks) / ranks, MEAN_RTOL
    wrong = 0
    for start in range(0, buf.size, BLOCK):
        got = buf[start:start + BLOCK].astype(xp.float64)
        expected = want[:got.size]
        # NaN compares False with everything: count it by negating the "close" test
        wrong += int(xp.count_nonzero(~(xp.abs(got - expected) <= rtol * xp.abs(expected))))
    return wrong
