"""Gradient averaging on CPU, 2 ranks: raw MPI vs ChainerMN's ``naive`` vs ``chunked``.

Gradients shaped like ResNet-50's (161 arrays, 25,557,032 float32). Timed:
one raw ``Allreduce`` on a contiguous buffer; the same buffer reduced in
chunks, swept over chunk sizes (the best is the transport's limit here);
``naive`` (one call per array); ``chunked`` at its default chunk size and over
the same sweep (all ranks on one node: its shared-memory exchange), and once
forced onto its MPI exchange (what ranks on several nodes use). Prints a table,
then one JSON line::

    {"ours_ms": ..., "naive_ms": ..., "best_raw_ms": ...,
     "ratio_vs_best_raw": best_raw_ms / ours_ms, "speedup_vs_naive": naive_ms / ours_ms, ...}

Run: ``python -m bench.allreduce [--repeat 15]`` (starts ``mpirun -np 2`` itself).
"""

from __future__ import annotations

import argparse
import json
import sys

from bench._mpi import interleaved_medians_ms, relaunch_under_mpirun

SWEEP = [1 << s for s in range(16, 25)]  # 64 KiB .. 16 MiB


def resnet50_grads(rank: int):
    import numpy

    from chainermn_rt.models import ResNet50

    rng = numpy.random.default_rng(rank)
    shapes = [p.shape for _, p in sorted(ResNet50().namedparams())]
    return [rng.standard_normal(s, dtype=numpy.float32) for s in shapes]


def as_link(grads):
    """A chainer Link whose parameters carry ``grads`` (what communicators average)."""
    import chainer

    link = chainer.Link()
    with link.init_scope():
        for i, g in enumerate(grads):
            param = chainer.Parameter(g.copy())
            param.grad = g
            setattr(link, f"p{i:03d}", param)
    return link


def chunked_call(comm, link):
    return lambda: comm.multi_node_mean_grad(link)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    if relaunch_under_mpirun(2):
        return 0
    import numpy
    from chainermn.communicators.naive_communicator import NaiveCommunicator
    from mpi4py import MPI

    from chainermn_rt.communicators.chunked import DEFAULT_CHUNK_BYTES, ChunkedCommunicator

    comm = MPI.COMM_WORLD
    grads = resnet50_grads(comm.rank)
    n = sum(g.size for g in grads)
    flat = numpy.concatenate([g.reshape(-1) for g in grads])

    def raw_chunked(chunk_bytes):
        step = chunk_bytes // flat.itemsize
        for s in range(0, flat.size, step):
            comm.Allreduce(MPI.IN_PLACE, flat[s:s + step])

    naive_link, link = as_link([g.copy() for g in grads]), as_link(grads)
    naive = NaiveCommunicator(comm)
    methods = {("raw Allreduce, one call", None): lambda: comm.Allreduce(MPI.IN_PLACE, flat)}
    methods.update({("raw Allreduce, chunked", c): (lambda c=c: raw_chunked(c)) for c in SWEEP})
    methods[("chainermn naive", None)] = lambda: naive.multi_node_mean_grad(naive_link)
    methods.update({("chunked (ours)", c): chunked_call(ChunkedCommunicator(comm, c), link)
                    for c in SWEEP})
    methods[("chunked (ours), default", DEFAULT_CHUNK_BYTES)] = chunked_call(
        ChunkedCommunicator(comm), link)
    methods[("chunked (ours), MPI exchange", DEFAULT_CHUNK_BYTES)] = chunked_call(
        ChunkedCommunicator(comm, shared_memory=False), link)
    ms = interleaved_medians_ms(comm, methods, args.repeat)
    rows = [(name, chunk, t) for (name, chunk), t in ms.items()]
    raw = {c: t for (name, c), t in ms.items() if name == "raw Allreduce, chunked"}
    ours = {c: t for (name, c), t in ms.items() if name == "chunked (ours)"}
    best_chunk = min(raw, key=raw.get)
    ours_ms = ms[("chunked (ours), default", DEFAULT_CHUNK_BYTES)]
    naive_ms = ms[("chainermn naive", None)]
    if comm.rank == 0:
        print(f"{len(grads)} arrays, {n:,} float32 ({4 * n / 1e6:.1f} MB), {comm.size} ranks, "
              f"median of {args.repeat} interleaved rounds, slowest rank")
        print(f"{'method':32} {'chunk':>9} {'ms':>8}")
        for name, chunk, t in rows:
            print(f"{name:32} {'' if chunk is None else f'{chunk >> 10} KiB':>9} {t:8.2f}")
        print(json.dumps({
            "ours_ms": round(ours_ms, 2), "naive_ms": round(naive_ms, 2),
            "best_raw_ms": round(raw[best_chunk], 2),
            "ratio_vs_best_raw": round(raw[best_chunk] / ours_ms, 3),
            "speedup_vs_naive": round(naive_ms / ours_ms, 3),
            "one_call_raw_ms": round(ms[("raw Allreduce, one call", None)], 2),
            "best_raw_chunk_bytes": best_chunk,
            "ours_chunk_bytes": DEFAULT_CHUNK_BYTES,
            "ours_mpi_exchange_ms": round(
                ms[("chunked (ours), MPI exchange", DEFAULT_CHUNK_BYTES)], 2),
            "best_ours_chunk_bytes": min(ours, key=ours.get), "arrays": len(grads),
            "values": n, "ranks": comm.size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
