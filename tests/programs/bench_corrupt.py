"""Run under ``mpirun -np 2``: ``chainermn-rt bench allreduce ARGS`` with one communicator
broken on purpose: after each of its reductions, rank 1 adds 1 to element 1 of buffers of
``--corrupt-bytes``. The sweep must report it (#wrong, files) and exit 1.

    mpirun -np 2 python tests/programs/bench_corrupt.py chunked 64 -- --max-bytes 256
"""

from __future__ import annotations

import sys

from chainermn_rt.benchmarks import allreduce
from chainermn_rt.cli import main

name, nbytes, sep, *cli_args = sys.argv[1:]
assert sep == "--", "usage: bench_corrupt.py COMMUNICATOR NBYTES -- BENCH-ALLREDUCE-ARGS"
bind = allreduce.Reducer.bind


def corrupting_bind(self, buf):
    call = bind(self, buf)
    if self.name != name or buf.nbytes != int(nbytes) or self.mpi_comm.Get_rank() != 1:
        return call

    def broken():
        call()
        buf[1] += 1
    return broken


allreduce.Reducer.bind = corrupting_bind
sys.exit(main(["bench", "allreduce", *cli_args]))
