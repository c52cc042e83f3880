"""``setup()``: everything a training script needs from the job, in one call.

Example::

    comm, device = chainermn_rt.setup()          # or setup("naive"), setup(chunk_bytes=...)
    model.to_device(device)
"""

from __future__ import annotations

import multiprocessing
import threading

from chainermn_rt import abort_on_error, devices, watchdog
from chainermn_rt.communicators import (
    CPU_COMMUNICATOR,
    create_communicator,
    nccl_gpu_available,
    resolve_name,
)
from chainermn_rt.job_env import JobEnvironment, check_against_mpi
from chainermn_rt.watchdog import startup

START_METHOD = "forkserver"  # fork after MPI/InfiniBand initialisation can crash


def setup(communicator: str = "auto", mpi_comm=None, *, abort_on_exception: bool = True,
          start_method: str | None = START_METHOD, **communicator_kwargs):
    """Return ``(comm, device)`` for this rank.

    Steps: set the multiprocessing start method (before MPI makes its
    connections); detect the launcher and cross-check it with MPI
    (``LauncherMismatch`` when they disagree); choose the GPU for the local
    rank honouring ``CUDA_VISIBLE_DEVICES`` (CPU when none); create the
    communicator (``auto``: ``pure_nccl`` on a GPU with NCCL, else ``chunked``);
    watch its collectives for stalls (:mod:`chainermn_rt.watchdog`); install the hook that
    calls ``MPI_Abort`` on an uncaught exception (:mod:`chainermn_rt.abort_on_error`), so one
    failing rank ends the job instead of hanging it.

    ``device`` is a ``chainer.backend.Device`` (``@cupy:N`` or ``@numpy``), already
    made current.
    """
    if start_method:
        multiprocessing.set_start_method(start_method, force=True)
    finished = threading.Event()
    startup.limit("chainermn_rt.setup() (MPI and the communicator's start-up)", finished.is_set)
    try:
        return _setup(communicator, mpi_comm, abort_on_exception, communicator_kwargs)
    finally:
        finished.set()


def _setup(communicator, mpi_comm, abort_on_exception, communicator_kwargs):
    import chainer
    from mpi4py import MPI

    mpi_comm = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
    env = check_against_mpi(JobEnvironment.detect(), mpi_comm)
    gpu = devices.choose_device(env.local_rank, env.local_size)
    name = resolve_name(communicator, gpu=gpu is not None and nccl_gpu_available())
    if name == CPU_COMMUNICATOR:
        gpu = None  # it averages NumPy arrays: train on CPU
    device = chainer.get_device(f"@cupy:{gpu}" if gpu is not None else "@numpy")
    device.use()
    comm = watchdog.watch(create_communicator(name, mpi_comm, **communicator_kwargs))
    if abort_on_exception:
        install_abort_hook()
    return comm, device


def install_abort_hook() -> None:
    """The ``MPI_Abort``-on-uncaught-exception hook, once (idempotent; off with
    ``CHAINERMN_RT_ABORT_ON_ERROR=0``)."""
    abort_on_error.install()
