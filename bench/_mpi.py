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

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "examples")]

from chainermn_rt.job_env import JobEnvironment  # noqa: E402 - needs the path above


def mpirun_argv(np: int) -> list[str]:
    """mpirun with the flags Open MPI needs on a small machine (and as root)."""
    argv = ["mpirun", "-np", str(np), "--oversubscribe"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    return argv


def relaunch_under_mpirun(np: int, extra_env: dict | None = None) -> bool:
    """When not started by a launcher, run this script under ``mpirun -np``; True in the parent."""
    if JobEnvironment.detect().launcher != "none":
        return False
    env = dict(os.environ, **(extra_env or {}))
    rc = subprocess.call(mpirun_argv(np) + [sys.executable, *sys.argv], env=env)
    if rc:
        sys.exit(rc)
    return True


def slowest_median_ms(comm, fn, repeat: int, warmup: int = 2) -> float:
    """Median over ``repeat`` calls of the slowest rank's time, in ms (barrier before each)."""
    return interleaved_medians_ms(comm, {"fn": fn}, repeat, warmup)["fn"]


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
