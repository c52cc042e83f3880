"""Communicators: ``auto`` picks ``pure_nccl`` on a GPU with NCCL, else the fast CPU one.

Example::

    comm = create_communicator("auto")         # pure_nccl or chunked
    comm = create_communicator("chunked", chunk_bytes=4 << 20)
    comm = create_communicator("naive")        # any chainermn name passes through

Importing this package is light; chainer and mpi4py load when a communicator is made.
"""

from __future__ import annotations

from chainermn_rt.errors import UserError

CPU_COMMUNICATOR = "chunked"
GPU_COMMUNICATOR = "pure_nccl"
CHAINERMN_NAMES = ("pure_nccl", "flat", "non_cuda_aware", "naive", "dummy")
NAMES = ("auto", CPU_COMMUNICATOR, *CHAINERMN_NAMES)
GPU_ONLY = ("pure_nccl", "flat", "non_cuda_aware")  # they average CuPy arrays
CPU_OPTIONS = ("chunk_bytes", "shared_memory")  # ChunkedCommunicator's keyword arguments


def nccl_gpu_available() -> bool:
    """True when CuPy imports, sees at least one GPU and finds NCCL."""
    try:
        import cupy
        from cupy.cuda import nccl

        return bool(getattr(nccl, "available", True)) and cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no NCCL: all mean "no"
        return False


def resolve_name(name: str, gpu: bool | None = None) -> str:
    """The concrete communicator ``name`` stands for (``auto`` -> pure_nccl or chunked)."""
    if name not in NAMES:
        raise UserError(f"communicator {name!r}; allowed: {', '.join(NAMES)}")
    if name != "auto":
        return name
    return GPU_COMMUNICATOR if (nccl_gpu_available() if gpu is None else gpu) else CPU_COMMUNICATOR


def create_communicator(name: str = "auto", mpi_comm=None, **kw):
    """Make a ChainerMN communicator by name; ``chunk_bytes=`` and ``shared_memory=`` apply
    to ``chunked`` only."""
    concrete = resolve_name(name)
    if mpi_comm is None:
        from mpi4py import MPI

        mpi_comm = MPI.COMM_WORLD
    if concrete == CPU_COMMUNICATOR:
        from chainermn_rt.communicators.chunked import ChunkedCommunicator

        return ChunkedCommunicator(mpi_comm, **kw)
    for cpu_only in CPU_OPTIONS:  # meaningful for the CPU communicator only (name="auto")
        kw.pop(cpu_only, None)
    import chainermn

    return chainermn.create_communicator(concrete, mpi_comm=mpi_comm, **kw)
