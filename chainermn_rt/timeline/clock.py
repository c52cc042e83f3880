"""Each rank's clock against rank 0's: a rank's stamps plus its offset are rank 0's time.

A rank's clock is its wall clock at the part's start plus a monotonic counter since
(:class:`Clock`: stamps never go backwards when NTP steps the wall clock). Rank 0 then
exchanges a few messages with every other rank, in turn (Cristian's method, as NTP does): the
rank sends its time ``t1``, rank 0 answers with its own ``t2``, the answer arrives at ``t3``.
Rank 0 read ``t2`` somewhere between ``t1`` and ``t3``, so ``offset = t2 - (t1 + t3) / 2`` is
exact to within half the round trip ``t3 - t1``; of ``rounds`` exchanges the one with the
shortest round trip is kept, and so is that bound (``rtt_us``: the error is at most half of it,
whatever the network did). Measured again at the end, the two estimates show the drift between
the start and the end, which the merge spreads linearly over the part.

>>> clock = Clock(origin_ns=10**18, counter=iter([4_000, 6_000, 9_000]).__next__)
>>> clock.origin_ns, clock.now_us(), clock.absolute_us(4)
(1000000000000000000, 4, 1000000000000004.0)
"""

from __future__ import annotations

import time
from collections.abc import Callable

_TAG = 0x7C1  # the exchanges' tag on the timeline's own communicator


class Clock:
    """Microseconds since the part's origin from a monotonic counter (ns); ``origin_ns``: the
    wall clock (ns since the epoch) at the counter's first reading."""

    def __init__(self, origin_ns: int | None = None,
                 counter: Callable[[], int] = time.perf_counter_ns):
        self.counter = counter
        before = counter()
        self.origin_ns = time.time_ns() if origin_ns is None else origin_ns
        self._zero = (before + counter()) // 2  # the counter when the wall clock was read

    def now_us(self) -> int:
        return (self.counter() - self._zero) // 1000

    def absolute_us(self, local_us: float) -> float:
        """A stamp as this rank's wall-clock time, in microseconds since the epoch."""
        return self.origin_ns / 1000 + local_us


def estimate(mpi_comm, clock: Clock, rounds: int = 16) -> tuple[float, float]:
    """(offset_us, rtt_us) of this rank's clock against rank 0's, on every rank (a collective:
    every rank of ``mpi_comm``, an mpi4py communicator, calls it); rank 0's is (0.0, 0.0)."""
    rank, size = mpi_comm.Get_rank(), mpi_comm.Get_size()
    now = lambda: clock.absolute_us(clock.now_us())  # noqa: E731
    if rank == 0:
        for other in range(1, size):
            for _ in range(rounds):
                mpi_comm.recv(source=other, tag=_TAG)
                mpi_comm.send(now(), dest=other, tag=_TAG)
        return 0.0, 0.0
    best = (0.0, float("inf"))
    for _ in range(rounds):
        t1 = now()
        mpi_comm.send(t1, dest=0, tag=_TAG)
        t2 = mpi_comm.recv(source=0, tag=_TAG)
        t3 = now()
        if t3 - t1 < best[1]:
            best = (t2 - (t1 + t3) / 2, t3 - t1)
    return best
