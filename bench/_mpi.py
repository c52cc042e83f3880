"""Shared by the benchmarks: start ourselves under ``mpirun -np N`` and time things.

Example::

    if relaunch_under_mpirun(2):   # the parent: mpirun ran the ranks
        sys.exit(0)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from chainermn_rt.job_env import JobEnvironment

REPO = Path(__file__).resolve().parent.parent


def mpirun_argv(np: int) -> list[str]:
    """mpirun with the flags Open MPI needs on a small machine (and as root)."""
    argv = ["mpirun", "-np", str(np), "--oversubscribe"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    return argv


def relaunch_under_mpirun(np: int, extra_env: dict | None = None) -> bool:
    """When not started by a launcher, run this benchmark (``python -m bench.NAME ...``) under
    ``mpirun -np`` from the checkout's root; True in the parent."""
    if JobEnvironment.detect().launcher != "none":
        return False
    env = dict(os.environ, **(extra_env or {}))
    module = sys.modules["__main__"].__spec__.name
    rc = subprocess.call(mpirun_argv(np) + [sys.executable, "-m", module, *sys.argv[1:]],
                         env=env, cwd=REPO)
    if rc:
        sys.exit(rc)
    return True


def interleaved_medians_ms(comm, methods: dict, rounds: int, warmup: int = 2) -> dict:
    """Per method, the median over ``rounds`` of the slowest rank's time in ms.

    Each round runs every method once, in turn, so a change in the machine's load
    during the run affects all methods alike and their ratios stay fair.
    """
    from mpi4py import MPI  # noqa: PLC0415

    times: dict = {name: [] for name in methods}
    for round_ in range(warmup + rounds):
        for name, fn in methods.items():
            comm.Barrier()
            start = time.perf_counter()
            fn()
            elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
            if round_ >= warmup:
                times[name].append(elapsed)
    return {name: 1000 * sorted(t)[len(t) // 2] for name, t in times.items()}
