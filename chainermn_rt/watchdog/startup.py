"""Start-up, bounded: a rank that never joins does not keep the others waiting forever.

MPI's start-up (``from mpi4py import MPI``) and ``chainermn_rt.setup()`` (its collectives
and the communicator's creation) wait until every rank has begun them. The per-rank step's
``sitecustomize`` calls :func:`arm` in every rank's Python before the program runs, and
``setup()`` bounds itself with :func:`limit`. Then

- a rank still in one of them ``CHAINERMN_RT_START_TIMEOUT`` seconds after it began it
  (default 600; 0: no limit) prints one line and ends, which ends the job (srun's
  ``--kill-on-bad-exit``, mpirun);
- a rank that has not even begun MPI's start-up half that time after it started says so:
  that line names the rank the others wait for (a stuck loader, a slow file system)::

    chainermn-rt: rank 3 on node2 has not begun MPI start-up 300 s after it started; ...
    chainermn-rt: rank 0 on node1: MPI start-up not complete 600 s after it began; ...

A program may start MPI late on purpose (after loading data): only the first line comes then.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping

from chainermn_rt.errors import print_line
from chainermn_rt.job_env import JobEnvironment
from chainermn_rt.rank_contract import RANK_PID_VAR
from chainermn_rt.watchdog.settings import read

MODULE = "mpi4py.MPI"
_started = time.monotonic()  # about when this rank's Python started (sitecustomize imports us)


def who(environ: Mapping[str, str] | None = None) -> str:
    rank = JobEnvironment.detect(os.environ if environ is None else environ).global_rank
    return f"rank {'?' if rank is None else rank} on {socket.gethostname()}"


def mpi_started() -> bool:
    """mpi4py.MPI imported and its module code (MPI_Init) finished."""
    module = sys.modules.get(MODULE)
    return module is not None and not getattr(module.__spec__, "_initializing", False)


# MPI_Init runs inside an import and holds the GIL: no Python thread of ours runs until it
# returns. So its limit is kept by a small watcher process; it ends when its stdin closes.
_WATCHER = """import os, select, signal, sys, time
pid, timeout, line = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
if select.select([0], [], [], timeout)[0]:
    sys.exit(0)
sys.stderr.write(line + "\\n")  # one write: see chainermn_rt.errors.print_line
sys.stderr.flush()
os.kill(pid, signal.SIGTERM)
time.sleep(5)
try:
    os.kill(pid, signal.SIGKILL)
except ProcessLookupError:
    pass
"""


def _line(what: str, timeout: float) -> str:
    return (f"chainermn-rt: {who()}: {what} not complete {timeout:.0f} s after it began; ending "
            "the job (a rank that has not begun it says so above)")


def limit(what: str, done: Callable[[], bool], timeout: float | None = None,
          holds_gil: bool = False) -> None:
    """Give ``what`` (begun now) ``timeout`` s (default: the setting) to be ``done()``, else
    print one line and end this rank. ``holds_gil``: ``what`` runs C code that keeps Python's
    threads from running (MPI_Init), so a watcher process keeps the time."""
    timeout = read().start_timeout if timeout is None else timeout
    if not timeout:
        return
    line = _line(what, timeout)
    watcher = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHER, str(os.getpid()),
                                str(timeout), line], stdin=subprocess.PIPE) if holds_gil else None

    def watch():
        deadline = time.monotonic() + timeout
        while not done():
            if watcher is None and time.monotonic() > deadline:
                print_line(line)
                os._exit(1)
            time.sleep(min(0.5, timeout / 20))
        if watcher is not None:
            watcher.stdin.close()  # done in time: the watcher exits
            watcher.wait()

    threading.Thread(target=watch, name="chainermn-rt-start-limit", daemon=True).start()


class _MpiStartup:
    """A meta path finder that only notices the import of mpi4py.MPI begin (it finds nothing)."""

    def __init__(self, timeout: float):
        self.timeout, self.begun = timeout, False

    def find_spec(self, name, path=None, target=None):
        if name == MODULE and not self.begun:
            self.begun = True
            limit("MPI start-up", mpi_started, self.timeout, holds_gil=True)
        return None

    def not_begun(self) -> None:
        """Half the time after Python started, name this rank if it has not begun MPI's."""
        time.sleep(max(0.0, _started + self.timeout / 2 - time.monotonic()))
        if not self.begun and MODULE not in sys.modules:
            print_line(f"chainermn-rt: {who()} has not begun MPI start-up "
                       f"{self.timeout / 2:.0f} s after it started; the others wait for it")


def arm(environ: Mapping[str, str] | None = None) -> bool:
    """Bound MPI's start-up in this process (once); returns whether it is on. Only in the
    rank's own process where the per-rank step says which that is (not in its data loaders)."""
    environ = os.environ if environ is None else environ
    if environ.get(RANK_PID_VAR, str(os.getpid())) != str(os.getpid()):
        return False
    timeout = read(environ).start_timeout
    if not timeout or MODULE in sys.modules \
            or any(isinstance(f, _MpiStartup) for f in sys.meta_path):
        return False
    finder = _MpiStartup(timeout)
    sys.meta_path.insert(0, finder)
    threading.Thread(target=finder.not_begun, name="chainermn-rt-not-begun", daemon=True).start()
    return True
