"""``chainermn-rt env [--json] [--mpi]``: what the launcher says about this rank.

Example::

    $ srun -N2 -n4 chainermn-rt env
    slurm: rank 3/4, local 1/2, node 1/2 on node2; device 1 (CUDA_VISIBLE_DEVICES=0,1)
    $ mpirun -np 2 chainermn-rt env --json --mpi
    {"launcher": "openmpi", "global_rank": 0, ..., "device": null, "mpi": "agrees"}

``--mpi`` also initialises MPI (mpi4py) and compares; exit status 1 when they disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from chainermn_rt.devices import VISIBLE_VAR, choose_device
from chainermn_rt.job_env import JobEnvironment, LauncherMismatch, check_against_mpi


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON line")
    parser.add_argument("--mpi", action="store_true",
                        help="initialise MPI and check that it agrees with the launcher")


def run(args: argparse.Namespace) -> int:
    env = JobEnvironment.detect()
    mpi, status = "not checked", 0
    if args.mpi:
        from mpi4py import MPI

        try:
            env = check_against_mpi(env, MPI.COMM_WORLD)
            mpi = "agrees"
        except LauncherMismatch as err:
            mpi, status = f"disagrees: {err}", 1
    known = env.local_rank is not None and env.local_size
    device = choose_device(env.local_rank, env.local_size) if known else None
    visible = os.environ.get(VISIBLE_VAR)
    if args.json:
        line = json.dumps({**asdict(env), "device": device, VISIBLE_VAR: visible, "mpi": mpi})
    else:
        where = "CPU" if device is None else f"device {device}"
        shown = "unset" if visible is None else repr(visible)
        line = f"{env.describe()}; {where} ({VISIBLE_VAR} {shown}); MPI {mpi}"
    sys.stdout.write(line + "\n")  # one write: lines of several ranks do not mix
    sys.stdout.flush()
    if status:
        print(f"chainermn-rt env: error: {mpi}", file=sys.stderr)
    return status
