"""One rank's uncaught exception ends the whole MPI job instead of hanging it.

Without this, the other ranks wait in a collective for the failed one, and so does the failed
one's MPI finalisation: the job lives until its time limit. :func:`install` wraps
``sys.excepthook``; the hook before it still runs first (the traceback is printed as usual).
Then, in a process whose mpi4py MPI is initialised, not finalised and has more than one rank,
the hook prints one line and calls ``MPI.COMM_WORLD.Abort(1)``::

    chainermn-rt: rank 1 on node2 failed: RuntimeError: out of data; aborting the job

``chainermn_rt.setup()`` installs it; for scripts that never call ``setup()``, ``chainermn-rt
rank`` puts :data:`PYTHONPATH_DIR` first on ``PYTHONPATH`` (:func:`rank_env`): its
``sitecustomize`` installs it in every Python process of the rank, then runs the
``sitecustomize`` it hides, if any. ``CHAINERMN_RT_ABORT_ON_ERROR=0`` turns both off.

>>> rank_env({"PYTHONPATH": "/mine", "CHAINERMN_RT_ABORT_ON_ERROR": "0"})
{}
>>> rank_env({"PYTHONPATH": "/mine"})["PYTHONPATH"] == f"{PYTHONPATH_DIR}:/mine"
True
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from chainermn_rt.errors import UserError
from chainermn_rt.rank_contract import ABORT_ON_ERROR_VAR

# Holds only sitecustomize.py: the folder the per-rank step puts first on PYTHONPATH.
PYTHONPATH_DIR = Path(__file__).resolve().parent / "pythonpath"
_MARK = "_chainermn_rt_abort_on_error"  # set on our hook: installed once per process


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``CHAINERMN_RT_ABORT_ON_ERROR`` leaves the hook on (unset, ``1``) or not (``0``)."""
    value = (os.environ if environ is None else environ).get(ABORT_ON_ERROR_VAR, "1")
    if value not in ("0", "1", ""):
        raise UserError(f"environment variable {ABORT_ON_ERROR_VAR}={value!r}; allowed: 1 "
                        "(the default: a failing rank aborts the job) or 0 (off)")
    return value != "0"


def installed() -> bool:
    """Whether ``sys.excepthook`` is this module's hook."""
    return bool(getattr(sys.excepthook, _MARK, False))


def install(environ: Mapping[str, str] | None = None) -> bool:
    """Wrap ``sys.excepthook`` unless turned off or already done; returns whether it is on."""
    if not enabled(environ):
        return False
    if installed():
        return True
    previous = sys.excepthook

    def hook(exc_type, value, tb):
        try:
            previous(exc_type, value, tb)
        finally:
            abort_if_mpi(exc_type, value)

    setattr(hook, _MARK, True)
    sys.excepthook = hook
    return True


def failure_line(rank: int, host: str, exc_type: type, value: BaseException | None) -> str:
    """``chainermn-rt: rank R on HOST failed: Type: message; aborting the job`` (one line)."""
    lines = str(value).strip().splitlines() if value is not None else []
    what = exc_type.__name__ + (f": {lines[0]}" + (" ..." if len(lines) > 1 else "")
                                if lines else "")
    return f"chainermn-rt: rank {rank} on {host} failed: {what}; aborting the job"


def abort_if_mpi(exc_type: type, value: BaseException | None) -> None:
    """``MPI_Abort`` the job when this process is one of several live MPI ranks; else nothing."""
    mpi = sys.modules.get("mpi4py.MPI")  # never imported here: a process without MPI is left be
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return
    world = mpi.COMM_WORLD
    if world.Get_size() < 2:
        return
    for stream in (sys.stdout, sys.stderr):  # Abort does not flush Python's buffers
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    print(failure_line(world.Get_rank(), socket.gethostname(), exc_type, value),
          file=sys.stderr, flush=True)
    world.Abort(1)


def rank_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What the per-rank step adds: ``PYTHONPATH`` with :data:`PYTHONPATH_DIR` first (the
    user's entries kept after it); nothing when turned off or already there."""
    if not enabled(environ):
        return {}
    current = environ.get("PYTHONPATH", "")
    if str(PYTHONPATH_DIR) in current.split(os.pathsep):
        return {}
    return {"PYTHONPATH": os.pathsep.join([str(PYTHONPATH_DIR), current]) if current
            else str(PYTHONPATH_DIR)}
