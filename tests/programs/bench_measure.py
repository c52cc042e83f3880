"""Run under ``mpirun -np N``: ``measure()`` as another module calls it (the doctor's
bandwidth probe); rank 0 prints each Measurement as one JSON line, ``count`` included.

    mpirun -np 2 python tests/programs/bench_measure.py 4096 mpi naive chunked
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from mpi4py import MPI

from chainermn_rt.benchmarks.allreduce import measure

nbytes, *names = sys.argv[1:]
for name in names:
    m = measure(MPI.COMM_WORLD, int(nbytes), communicator=name, repeat=3, warmup=0)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(json.dumps({**asdict(m), "count": m.count, "redop": m.redop}), flush=True)
