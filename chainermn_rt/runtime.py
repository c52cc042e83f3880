"""Starting a rank: :func:`start_rank` (MPI, launcher, abort hook), then ``setup()`` on top.

Example::

    comm, device = chainermn_rt.setup()          # or setup("naive"), setup(chunk_bytes=...)
    model.to_device(device)

``chainermn-rt bench`` starts its ranks with :func:`start_rank` too, so a benchmark's rank
is set up exactly as a training script's.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from dataclasses import dataclass

from chainermn_rt import abort_on_error, devices, watchdog
from chainermn_rt.communicators import (
    CPU_COMMUNICATOR,
    create_communicator,
    nccl_gpu_available,
    resolve_name,
)
from chainermn_rt.errors import UserError, print_line
from chainermn_rt.job_env import JobEnvironment, check_against_mpi, first_rank
from chainermn_rt.rank_contract import check_settings
from chainermn_rt.watchdog import startup

START_METHOD = "forkserver"  # fork after MPI/InfiniBand initialisation can crash


@dataclass(frozen=True)
class Rank:
    """This process as one rank: its MPI communicator and its place in the job."""

    mpi_comm: object
    env: JobEnvironment

    def gpu(self) -> int | None:
        """The CUDA ordinal of this rank's GPU (``CUDA_VISIBLE_DEVICES``-aware), None on a
        machine without a GPU, CuPy or NCCL; UserError with more local ranks than GPUs."""
        if not nccl_gpu_available():
            return None
        return devices.choose_device(self.env.local_rank, self.env.local_size)


def check_rank_settings() -> None:
    """The rank's ``CHAINERMN_RT_*`` settings, before anything starts: a bad one is one line
    (from the launcher's rank 0 only: every rank has the same environment) and exit 2."""
    try:
        check_settings(os.environ)
    except UserError as err:
        if first_rank():
            print_line(f"chainermn-rt: error: {err}")
        raise SystemExit(UserError.exit_status) from None


def start_rank(mpi_comm=None, *, abort_on_exception: bool = True,
               start_method: str | None = START_METHOD) -> Rank:
    """Check the rank's settings; set the multiprocessing start method (before MPI makes its
    connections); start MPI, bounded by the start-up limit; cross-check the launcher with MPI
    (``LauncherMismatch`` when they disagree); install the hook that calls ``MPI_Abort`` on an
    uncaught exception (:mod:`chainermn_rt.abort_on_error`), so one failing rank ends the job
    instead of hanging it."""
    check_rank_settings()
    if start_method:
        multiprocessing.set_start_method(start_method, force=True)
    finished = threading.Event()
    startup.limit("MPI's start-up and the rank's set-up", finished.is_set)
    try:
        from mpi4py import MPI

        mpi_comm = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
        env = check_against_mpi(JobEnvironment.detect(), mpi_comm)
        if abort_on_exception:
            abort_on_error.install()
        return Rank(mpi_comm, env)
    finally:
        finished.set()


def setup(communicator: str = "auto", mpi_comm=None, *, abort_on_exception: bool = True,
          start_method: str | None = START_METHOD, **communicator_kwargs):
    """Return ``(comm, device)`` for this rank.

    :func:`start_rank`, then: choose the GPU for the local rank honouring
    ``CUDA_VISIBLE_DEVICES`` (CPU when none); create the communicator (``auto``:
    ``pure_nccl`` on a GPU with NCCL, else ``chunked``); watch its collectives for stalls
    (:mod:`chainermn_rt.watchdog`). The start-up limit covers the communicator's creation.

    ``device`` is a ``chainer.backend.Device`` (``@cupy:N`` or ``@numpy``), already
    made current.
    """
    finished = threading.Event()
    rank = start_rank(mpi_comm, abort_on_exception=abort_on_exception,
                      start_method=start_method)
    startup.limit("chainermn_rt.setup()'s communicator", finished.is_set)
    try:
        import chainer

        gpu = rank.gpu()
        name = resolve_name(communicator, gpu=gpu is not None)
        if name == CPU_COMMUNICATOR:
            gpu = None  # it averages NumPy arrays: train on CPU
        device = chainer.get_device(f"@cupy:{gpu}" if gpu is not None else "@numpy")
        device.use()
        comm = watchdog.watch(create_communicator(name, rank.mpi_comm, **communicator_kwargs))
        return comm, device
    finally:
        finished.set()
