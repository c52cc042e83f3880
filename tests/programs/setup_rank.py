"""Run under ``mpirun -np 2``: what ``chainermn_rt.setup()`` returns and installs.

With ``--fail-rank N`` rank N raises after setup while the others wait for it forever:
the abort hook must end the whole job.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing

import chainermn_rt
from chainermn_rt.abort_on_error import installed

parser = argparse.ArgumentParser()
parser.add_argument("--communicator", default="auto")
parser.add_argument("--fail-rank", type=int, default=-1)
args = parser.parse_args()

comm, device = chainermn_rt.setup(args.communicator)

if comm.rank == args.fail_rank:
    raise RuntimeError(f"rank {comm.rank} fails on purpose")
if args.fail_rank >= 0:
    comm.mpi_comm.recv(source=args.fail_rank)  # would hang forever without the hook
rows = comm.gather_obj({
    "rank": comm.rank, "size": comm.size, "communicator": type(comm).__name__,
    "device": str(device), "start_method": multiprocessing.get_start_method(),
    "abort_hook": installed(),
    "intra_rank": comm.intra_rank})
if comm.rank == 0:
    print(json.dumps(rows), flush=True)
