"""Allreduce bandwidth of each communicator, nccl-tests style: one float32 buffer per size.

Per size and communicator, on every rank: fill the buffer with the rank's pattern
(pattern.py), barrier, time one in-place reduction, take the slowest rank's time; after
``warmup`` untimed calls, ``seconds`` is the median over ``repeat`` timed calls. Every
call's result is checked element by element on every rank; ``wrong`` adds up the wrong
elements of all calls and ranks.

- ``mpi``: ``MPI_Allreduce(MPI_IN_PLACE, buf, SUM)`` on a NumPy buffer (mpi4py);
- ``naive``, ``chunked``, ``pure_nccl``: ChainerMN's ``multi_node_mean_grad(link)`` on a
  link whose one parameter's gradient is the buffer (NumPy; CuPy for ``pure_nccl``, on the
  current GPU), which replaces the gradient by its mean over the ranks: what the
  multi-node optimizer calls in every training step. For ``pure_nccl`` the GPU is
  synchronised before the clock stops.

Bandwidths as defined by nccl-tests (doc/PERFORMANCE.md there): ``algbw = bytes / seconds``
and ``busbw = algbw * (2 * (n - 1) / n)`` for ``n`` ranks, the traffic each rank's link
carries in a ring allreduce, comparable across rank counts; both in GB/s (1e9 bytes/s).

>>> sizes(8, 64)
[8, 16, 32, 64]
>>> bandwidths(2_000_000_000, 1.0, ranks=4)      # 2 GB in 1 s
(2.0, 3.0)

Example, every rank under mpirun (the raw MPI communicator needs no GPU)::

    from mpi4py import MPI
    m = measure(MPI.COMM_WORLD, 1 << 20)          # 1 MiB, "mpi", median of 5
    print(m.busbw_gbps, m.wrong)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from chainermn_rt.benchmarks import pattern

COMMUNICATORS = ("mpi", "naive", "chunked", "pure_nccl")
GPU_COMMUNICATORS = ("pure_nccl",)
DTYPE = "float32"
ITEMSIZE = 4  # bytes of one float32
REPEAT, WARMUP = 5, 1


@dataclass(frozen=True)
class Measurement:
    """One size of one communicator; ``seconds`` the median of the slowest rank's times,
    bandwidths in GB/s, ``wrong`` the wrong elements of all calls on all ranks."""

    nbytes: int
    seconds: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int
    communicator: str
    ranks: int

    @property
    def count(self) -> int:
        """Elements (float32)."""
        return self.nbytes // ITEMSIZE

    @property
    def redop(self) -> str:
        """``sum`` (raw MPI) or ``mean`` (ChainerMN's gradient averaging)."""
        return redop(self.communicator)


def redop(communicator: str) -> str:
    return "sum" if communicator == "mpi" else "mean"


def bus_factor(ranks: int) -> float:
    """nccl-tests' allreduce factor ``2 (n - 1) / n``: busbw = algbw * bus_factor(n).

    >>> [bus_factor(n) for n in (1, 2, 4)]
    [0.0, 1.0, 1.5]
    """
    return 2 * (ranks - 1) / ranks


def bandwidths(nbytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in GB/s for ``nbytes`` reduced in ``seconds`` by ``ranks`` ranks."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * bus_factor(ranks)


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """``min_bytes``, doubling, up to ``max_bytes`` (included when reached)."""
    if min_bytes < ITEMSIZE or min_bytes % ITEMSIZE or max_bytes < min_bytes:
        raise ValueError(f"sizes {min_bytes}..{max_bytes}; allowed: a multiple of "
                         f"{ITEMSIZE} up to at least as much")
    found = [min_bytes]
    while found[-1] * 2 <= max_bytes:
        found.append(found[-1] * 2)
    return found


class Reducer:
    """One communicator's in-place reduction of 1-D float32 buffers; ``close()`` when done
    (collective, like the constructor)."""

    def __init__(self, mpi_comm, communicator: str):
        if communicator not in COMMUNICATORS:
            raise ValueError(f"communicator {communicator!r}; allowed: "
                             f"{', '.join(COMMUNICATORS)}")
        self.name, self.mpi_comm, self.redop = communicator, mpi_comm, redop(communicator)
        self.gpu = communicator in GPU_COMMUNICATORS
        self.chainermn = None
        if communicator != "mpi":
            from chainermn_rt.communicators import create_communicator

            self.chainermn = create_communicator(communicator, mpi_comm)

    @property
    def xp(self):
        if self.gpu:
            import cupy

            return cupy
        import numpy

        return numpy

    def sync(self) -> None:
        """Wait for the GPU (pure_nccl); nothing on CPU."""
        if self.gpu:
            import cupy

            cupy.cuda.Device().synchronize()

    def bind(self, buf):
        """A call that reduces ``buf`` in place (``sum`` for mpi, else ``mean``)."""
        if self.chainermn is None:
            from mpi4py import MPI

            return lambda: self.mpi_comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        import chainer

        link = chainer.Link()
        with link.init_scope():
            link.p = chainer.Parameter(buf)
        link.p.grad = buf

        def call():
            self.chainermn.multi_node_mean_grad(link)
            self.sync()
        return call

    def measure(self, nbytes: int, repeat: int = REPEAT, warmup: int = WARMUP) -> Measurement:
        """Time ``repeat`` reductions of ``nbytes`` after ``warmup`` (see the module doc)."""
        from mpi4py import MPI

        if nbytes < ITEMSIZE or nbytes % ITEMSIZE or repeat < 1 or warmup < 0:
            raise ValueError(f"nbytes {nbytes}, repeat {repeat}, warmup {warmup}; allowed: "
                             f"a multiple of {ITEMSIZE}, 1 or more, 0 or more")
        comm, rank, ranks = self.mpi_comm, self.mpi_comm.Get_rank(), self.mpi_comm.Get_size()
        buf = self.xp.empty(nbytes // ITEMSIZE, dtype=self.xp.float32)
        call, times, wrong = self.bind(buf), [], 0
        for i in range(warmup + repeat):
            pattern.fill(buf, rank)
            self.sync()
            comm.Barrier()
            start = time.perf_counter()
            call()
            slowest = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
            if i >= warmup:
                times.append(slowest)
            wrong += pattern.count_wrong(buf, ranks, self.redop)
        seconds = statistics.median(times)
        algbw, busbw = bandwidths(nbytes, seconds, ranks)
        return Measurement(nbytes, seconds, algbw, busbw, comm.allreduce(wrong, op=MPI.SUM),
                           self.name, ranks)

    def close(self) -> None:
        if self.chainermn is not None:
            self.chainermn.finalize()


def measure(comm_mpi, nbytes: int, communicator: str = "mpi", repeat: int = REPEAT,
            warmup: int = WARMUP) -> Measurement:
    """One allreduce measurement of ``nbytes`` (a multiple of 4) on every rank of the mpi4py
    communicator ``comm_mpi`` (collective). ``communicator``: ``mpi``, ``naive``, ``chunked``
    or ``pure_nccl`` (on the current GPU). See the module doc for what is timed.

    Example (every rank)::

        m = measure(MPI.COMM_WORLD, 64 << 20, communicator="mpi", repeat=5, warmup=1)
        m.seconds, m.algbw_gbps, m.busbw_gbps, m.wrong
    """
    reducer = Reducer(comm_mpi, communicator)
    try:
        return reducer.measure(nbytes, repeat, warmup)
    finally:
        reducer.close()


def sweep(comm_mpi, nbytes: Sequence[int], communicators: Sequence[str],
          repeat: int = REPEAT, warmup: int = WARMUP) -> Iterator[Measurement]:
    """``measure`` for every size (outer loop) and communicator (inner loop), each
    communicator made once; every rank must consume the whole sweep."""
    reducers = []
    try:
        for name in communicators:
            reducers.append(Reducer(comm_mpi, name))
        for size in nbytes:
            for reducer in reducers:
                yield reducer.measure(size, repeat, warmup)
    finally:
        for reducer in reducers:
            reducer.close()
