"""Run under ``mpirun -np N`` (N > 2): ``chunked`` gives every rank the same mean.

With more than two ranks the order of a sum may differ from ``naive``'s, so this
checks that all ranks end with identical bits, close to the mean computed in
float64, with each exchange. Rank 0 prints one JSON line:
{"ranks": N, "auto": "SharedWindow" | "MpiChunks", "cases": n}; a failure exits 1.
"""

from __future__ import annotations

import json

import numpy
from mpi4py import MPI

from chainermn_rt.communicators.chunked import ChunkedCommunicator

comm = MPI.COMM_WORLD
rng = numpy.random.default_rng(99 + comm.rank)
SHAPES = [(1,), (17,), (1000,), (33, 65), (4097,)]
TOLERANCE = {numpy.float16: 2e-3, numpy.float32: 1e-6, numpy.float64: 1e-13}

cases = 0
for dtype, chunk, shared in [(d, c, s) for d in TOLERANCE for c in (64, 4096)
                             for s in (None, False)]:
    arrays = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    want = [comm.allreduce(a.astype(numpy.float64)) / comm.size for a in arrays]
    chunked = ChunkedCommunicator(comm, chunk_bytes=chunk, shared_memory=shared)
    chunked.multi_node_mean_arrays(arrays)
    chunked.finalize()
    for got, exact in zip(arrays, want, strict=True):
        assert numpy.allclose(got, exact, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype]), \
            (dtype, chunk, shared, float(numpy.abs(got - exact).max()))
    digest = b"".join(a.tobytes() for a in arrays)
    assert len(set(comm.allgather(digest))) == 1, f"ranks differ: {dtype} {chunk} {shared}"
    cases += 1

auto = type(ChunkedCommunicator(comm).exchange).__name__
if comm.rank == 0:
    print(json.dumps({"ranks": comm.size, "auto": auto, "cases": cases}), flush=True)
