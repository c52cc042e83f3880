"""Run under ``mpirun -np 2``: ``chunked`` must average exactly like ChainerMN's ``naive``.

Rank 0 prints one JSON line per rank ({"rank": r, "cases": n, "checksum": ...});
a mismatch exits 1.
"""

from __future__ import annotations

import itertools
import json
import sys

import chainer
import chainermn
import numpy
from chainermn.communicators.naive_communicator import NaiveCommunicator
from mpi4py import MPI

from chainermn_rt.communicators import create_communicator
from chainermn_rt.communicators.chunked import ChunkedCommunicator
from chainermn_rt.communicators.mpi_chunks import MpiChunks
from chainermn_rt.communicators.shared_window import SharedWindow

comm = MPI.COMM_WORLD
rng = numpy.random.default_rng(1234 + comm.rank)


def values(shape, dtype):
    """Normal values over many exponents, with zeros, subnormals and infinities sprinkled in."""
    x = numpy.asarray(rng.standard_normal(shape) * numpy.exp2(rng.integers(-30, 30, shape)))
    flat = x.reshape(-1)
    if flat.size > 8:
        tiny = numpy.finfo(dtype).smallest_subnormal
        flat[:4] = [0.0, tiny, -3 * tiny, numpy.inf if comm.rank else 1.0]
    return numpy.asarray(x).astype(dtype)


def link_of(arrays, grads_none=()):
    link = chainer.Link()
    with link.init_scope():
        for i, a in enumerate(arrays):
            p = chainer.Parameter(numpy.zeros_like(a))
            p.grad = None if i in grads_none else a.copy()
            setattr(link, f"p{i:03d}", p)
    return link


def grads(link):
    return [(name, None if p.grad is None else p.grad.copy())
            for name, p in sorted(link.namedparams())]


def same_bits(a, b):
    if a is None or b is None:
        return a is b
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# shapes straddling the chunk boundaries of the chunk sizes below (in float32 elements:
# 16, 25, 1024, 16384; float64 and float16-as-float32 alike), zero-size and odd sizes
SHAPES = [(), (0,), (1,), (15,), (16,), (17,), (3, 5, 7), (25,), (26,), (1023,), (1024,),
          (1025,), (64, 3, 3, 3), (2047, 3), (8191,), (8192,), (8193,), (16383,), (16384,),
          (16385,), (129, 131)]
CHUNKS = [64, 100, 4096, 1 << 16]
EXCHANGES = [True, False]  # SharedWindow, MpiChunks
cases = 0
checksum = 0.0
for dtype in (numpy.float32, numpy.float64, numpy.float16):
    arrays = [values(s, dtype) for s in SHAPES]
    for zero_fill, none in ((False, ()), (True, (2, 9))):
        ref = link_of(arrays, none)
        NaiveCommunicator(comm).multi_node_mean_grad(ref, zero_fill=zero_fill)
        expected = grads(ref)
        for chunk, shared in itertools.product(CHUNKS, EXCHANGES):
            link = link_of(arrays, none)
            chunked = ChunkedCommunicator(comm, chunk_bytes=chunk, shared_memory=shared)
            chunked.multi_node_mean_grad(link, zero_fill)
            got = grads(link)
            bad = [n for (n, a), (_, b) in zip(expected, got, strict=True) if not same_bits(a, b)]
            if bad:
                print(f"rank {comm.rank}: {numpy.dtype(dtype)} chunk {chunk} shared_memory "
                      f"{shared} zero_fill {zero_fill}: differs from naive in {bad}",
                      file=sys.stderr, flush=True)
                sys.exit(1)
            chunked.finalize()
            cases += 1
        checksum += float(sum(numpy.nansum(g[numpy.isfinite(g)], dtype=numpy.float64)
                              for _, g in expected if g is not None))

# mixed float16/float32 in one model, and a non-contiguous array
for shared in EXCHANGES:
    mixed = [values((33,), numpy.float16), values((40,), numpy.float32)]
    ref, link = link_of(mixed), link_of(mixed)
    NaiveCommunicator(comm).multi_node_mean_grad(ref)
    ChunkedCommunicator(comm, chunk_bytes=64, shared_memory=shared).multi_node_mean_grad(link)
    pairs = zip(grads(ref), grads(link), strict=True)
    assert all(same_bits(a, b) for (_, a), (_, b) in pairs), f"mixed dtypes, {shared}"
    strided = values((8, 6), numpy.float32)
    want = comm.allreduce(strided[:, ::2].astype(numpy.float64)) * 0.5
    view = strided[:, ::2]
    ChunkedCommunicator(comm, chunk_bytes=64, shared_memory=shared).multi_node_mean_arrays([view])
    assert numpy.array_equal(view, want.astype(numpy.float32)), f"non-contiguous, {shared}"
    cases += 2

# both ranks end with identical values
digest = numpy.frombuffer(b"".join(g.tobytes() for _, g in grads(link)), numpy.uint8)
assert comm.allreduce(int(digest.sum()), op=MPI.MAX) == int(digest.sum())

# unsupported input is refused clearly
for bad in (numpy.arange(4, dtype=numpy.int32),):
    try:
        ChunkedCommunicator(comm).multi_node_mean_arrays([bad])
    except TypeError as err:
        assert "int32" in str(err)
    else:
        raise AssertionError("int32 accepted")

# auto: two ranks of one node share memory
assert isinstance(ChunkedCommunicator(comm).exchange, SharedWindow)
assert isinstance(ChunkedCommunicator(comm, shared_memory=False).exchange, MpiChunks)
# split keeps the chunk size and a forced exchange
forced = ChunkedCommunicator(comm, chunk_bytes=4096, shared_memory=False).split(0, comm.rank)
assert (forced.chunk_bytes, type(forced.exchange)) == (4096, MpiChunks)
assert isinstance(ChunkedCommunicator(comm).split(0, comm.rank).exchange, SharedWindow)

# by name: ours, chainermn's registry (the patched chainer's entry point), auto on CPU
ours = create_communicator("chunked", chunk_bytes=4096)
assert type(ours) is ChunkedCommunicator and ours.chunk_bytes == 4096
assert type(create_communicator("auto")) is ChunkedCommunicator
# the CPU communicator's options do not reach ChainerMN's (auto may mean pure_nccl)
assert type(create_communicator("naive", chunk_bytes=4096, shared_memory=False)) \
    is NaiveCommunicator
by_chainermn = chainermn.create_communicator("chunked")
assert type(by_chainermn) is ChunkedCommunicator, type(by_chainermn)
rows = comm.gather({"rank": comm.rank, "cases": cases, "checksum": checksum})
if comm.rank == 0:
    print("\n".join(json.dumps(r) for r in rows), flush=True)
