"""One rank's failure ends the whole MPI job instead of hanging it.

Without this, the other ranks wait in a collective for the failed one, and so does the failed
one's MPI finalisation: the job lives until its time limit. :func:`install` covers three ways
a rank fails, each only in a process whose mpi4py MPI is initialised, not finalised and has
more than one rank:

- an uncaught exception (``sys.excepthook``, and ``threading.excepthook`` for other threads):
  the hook before it still runs first (the traceback is printed as usual; a
  :class:`~chainermn_rt.errors.UserError` is one line instead), then one line and
  ``MPI.COMM_WORLD.Abort`` (status 2 for a UserError, else 1; a UserError in a one-rank job
  exits 2 too; one every rank raises, ``everywhere``, is printed and aborted by rank 0, the
  others waiting up to :data:`EVERYWHERE_WAIT_S` for it)::

    chainermn-rt: rank 1 on node2 failed: RuntimeError: out of data; aborting the job

- ``sys.exit(N)`` with N not 0: at exit, one line, then mpi4py aborts instead of finalising.

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

import atexit
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from chainermn_rt.errors import UserError, print_line
from chainermn_rt.rank_contract import ABORT_ON_ERROR_VAR, setting

# Holds only sitecustomize.py: the folder the per-rank step puts first on PYTHONPATH.
PYTHONPATH_DIR = Path(__file__).resolve().parent / "pythonpath"
_MARK = "_chainermn_rt_abort_on_error"  # set on our hook: installed once per process


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``CHAINERMN_RT_ABORT_ON_ERROR`` leaves the hook on (unset, ``1``) or not (``0``);
    a UserError for any other value."""
    return setting(os.environ if environ is None else environ, ABORT_ON_ERROR_VAR, "1") != "0"


def installed() -> bool:
    """Whether ``sys.excepthook`` is this module's hook."""
    return bool(getattr(sys.excepthook, _MARK, False))


def install(environ: Mapping[str, str] | None = None) -> bool:
    """Wrap ``sys.excepthook`` unless turned off or already done; returns whether it is on."""
    if not enabled(environ):
        return False
    if installed():
        return True
    previous, previous_thread_hook, previous_exit = sys.excepthook, threading.excepthook, sys.exit

    def hook(exc_type, value, tb):
        user_error = isinstance(value, UserError)
        try:
            if not user_error:
                previous(exc_type, value, tb)
            elif _shows(value) or not _ended_by_rank_0():
                print_line(f"chainermn-rt: error: {value}")
        finally:
            abort_if_mpi(exc_type, value, announce=not user_error)  # its line says it all
        if user_error and _live_world() is None:  # one process: still bad input's status, 2
            _exit_now(value.exit_status)

    def thread_hook(args):
        try:
            previous_thread_hook(args)
        finally:
            if args.exc_type is not SystemExit:
                abort_if_mpi(args.exc_type, args.exc_value, args.thread)

    def exit_(status=None):
        global _exit_status
        code = status if isinstance(status, int) else (0 if status is None else 1)
        _exit_status = code if code else None
        previous_exit(status)

    setattr(hook, _MARK, True)
    sys.excepthook, threading.excepthook, sys.exit = hook, thread_hook, exit_
    atexit.register(_abort_at_exit)
    return True


_exit_status: int | None = None  # sys.exit's last non-zero status


def _exit_now(status: int) -> None:
    """End the process with ``status`` after what exit would do (atexit: MPI's finalisation);
    an uncaught exception would otherwise give 1."""
    _flush()
    atexit._run_exitfuncs()
    os._exit(status)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _shows(value: BaseException) -> bool:
    """A UserError every rank raised alike is printed by rank 0 alone."""
    mpi = sys.modules.get("mpi4py.MPI")
    if not getattr(value, "everywhere", False) or mpi is None or not mpi.Is_initialized() \
            or mpi.Is_finalized():
        return True
    return mpi.COMM_WORLD.Get_rank() == 0


# How long another rank waits for rank 0, which raised the same error, to print it and abort.
EVERYWHERE_WAIT_S = 60.0


def _ended_by_rank_0() -> bool:
    """For a UserError every rank raised, on a rank other than 0: wait for rank 0's abort to end
    this process (aborting first could kill rank 0 before its line is out); False when rank 0
    has not done so within EVERYWHERE_WAIT_S (it did not raise it: this rank prints it)."""
    deadline = time.monotonic() + EVERYWHERE_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.1)
    return False


def _abort_at_exit() -> None:
    """Runs before mpi4py finalises MPI: after sys.exit(N), N not 0, abort instead."""
    mpi = _live_world()
    if _exit_status is None or mpi is None:
        return
    world = mpi.COMM_WORLD
    print_line(f"chainermn-rt: rank {world.Get_rank()} on {socket.gethostname()} exited with "
               f"status {_exit_status}; aborting the job")
    mpi._set_abort_status(_exit_status)


def _live_world():
    """mpi4py's MPI module when it is initialised, not finalised, with several ranks."""
    mpi = sys.modules.get("mpi4py.MPI")  # never imported here: a process without MPI is left be
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized() \
            or mpi.COMM_WORLD.Get_size() < 2:
        return None
    return mpi


def failure_line(rank: int, host: str, exc_type: type, value: BaseException | None) -> str:
    """``chainermn-rt: rank R on HOST failed: Type: message; aborting the job`` (one line)."""
    lines = str(value).strip().splitlines() if value is not None else []
    what = exc_type.__name__ + (f": {lines[0]}" + (" ..." if len(lines) > 1 else "")
                                if lines else "")
    return f"chainermn-rt: rank {rank} on {host} failed: {what}; aborting the job"


def abort_if_mpi(exc_type: type, value: BaseException | None, thread=None,
                 announce: bool = True) -> None:
    """``MPI_Abort`` the job when this process is one of several live MPI ranks; else nothing.
    ``announce``: first print the one line naming the rank, host and exception."""
    mpi = _live_world()
    if mpi is None:
        return
    world = mpi.COMM_WORLD
    _flush()  # Abort does not flush Python's buffers
    line = failure_line(world.Get_rank(), socket.gethostname(), exc_type, value)
    if thread is not None:
        line = line.replace(" failed:", f" failed in thread {thread.name!r}:", 1)
    if announce:
        print_line(line)
    world.Abort(exc_type.exit_status if issubclass(exc_type, UserError) else 1)


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
