"""chainermn-rt: ChainerMN data-parallel training on today's stack, on Slurm clusters.

Porting a single-process Chainer script (docs/porting.md)::

    import chainermn, chainermn_rt
    comm, device = chainermn_rt.setup()          # rank, GPU, communicator, abort hook
    model.to_device(device)
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)

Importing this package is light: chainer and mpi4py load inside ``setup()``.
"""

from __future__ import annotations

from chainermn_rt.communicators import create_communicator
from chainermn_rt.job_env import JobEnvironment, LauncherMismatch, check_against_mpi
from chainermn_rt.runtime import setup
from chainermn_rt.snapshots import resumable
from chainermn_rt.timeline import timeline

__all__ = ["JobEnvironment", "LauncherMismatch", "check_against_mpi", "create_communicator",
           "resumable", "setup", "timeline", "version"]


def version() -> str:
    """The installed package's version (its metadata; PackageNotFoundError when it is not
    installed)."""
    from importlib.metadata import version as installed

    return installed("chainermn-rt")
