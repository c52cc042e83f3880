"""Each rank prints {"rank", "host", "exchange", "mean"}: which exchange ``chunked`` chose
(where all ranks share a node: SharedWindow, else MpiChunks) and the mean of ``rank + 1``."""

from __future__ import annotations

import json

import numpy
from mpi4py import MPI

from chainermn_rt.communicators.chunked import ChunkedCommunicator

comm = MPI.COMM_WORLD
chunked = ChunkedCommunicator(comm, chunk_bytes=4096)
values = numpy.full(10_000, comm.rank + 1.0, numpy.float32)  # whole chunks and a tail
chunked.multi_node_mean_arrays([values])
assert numpy.all(values == values[0])
print(json.dumps({"rank": comm.rank, "host": MPI.Get_processor_name(),
                  "exchange": type(chunked.exchange).__name__, "mean": float(values[0])}),
      flush=True)
