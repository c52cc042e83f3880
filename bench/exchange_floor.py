"""Where the time of averaging ResNet-50-shaped gradients goes, 2 ranks on one node.

Explains the distance between ``chunked`` and "best raw" in ``bench/allreduce.py``
by timing, in one ``mpirun -np 2`` with interleaved rounds:

- the layout: raw chunked ``Allreduce`` (no scaling) on one flat buffer with
  transparent huge pages, the same buffer without them, and the 161 separate
  arrays in place;
- the shared-memory exchange (``SharedWindow``) taken apart, on the arrays'
  whole chunks: copy into the buffer only; copy and add the other rank's buffer;
  all three steps (copy, add, scale), which is what ``chunked`` does; and add
  and scale without the copy (results wrong; shows what the copy costs); and
  ``SharedWindow.mean`` itself on all arrays (tails and small arrays included).

Run: ``python -m bench.exchange_floor [--repeat 11] [--chunk-bytes 262144]``
"""

from __future__ import annotations

import argparse
import json
import mmap
import sys

from bench._mpi import interleaved_medians_ms, relaunch_under_mpirun
from bench.allreduce import resnet50_grads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--chunk-bytes", type=int, default=1 << 18)
    args = parser.parse_args()
    if relaunch_under_mpirun(2):
        return 0
    import numpy
    from mpi4py import MPI

    from chainermn_rt.communicators.shared_window import SharedWindow

    comm = MPI.COMM_WORLD
    grads = resnet50_grads(comm.rank)
    flat = numpy.concatenate([g.reshape(-1) for g in grads])  # numpy asks for huge pages
    no_huge = mmap.mmap(-1, flat.nbytes)
    no_huge.madvise(mmap.MADV_NOHUGEPAGE)
    flat_small_pages = numpy.frombuffer(no_huge, numpy.float32)
    flat_small_pages[:] = flat
    step = args.chunk_bytes // 4

    def raw(arrays):
        for a in arrays:
            for s in range(0, a.size, step):
                comm.Allreduce(MPI.IN_PLACE, a[s:s + step])

    window = SharedWindow(comm.Split_type(MPI.COMM_TYPE_SHARED), args.chunk_bytes)
    views = window.views(numpy.dtype(numpy.float32))
    me, half = comm.rank, numpy.float32(0.5)
    pieces = [g.reshape(-1)[s:s + step] for g in grads
              for s in range(0, g.size - step + 1, step)]  # whole chunks only

    def shared(copy=True, add=True, scale=True):
        for piece in pieces:
            parts = views[window.turn]
            if copy:
                parts[me][:] = piece
            window.barrier()
            if add:
                numpy.add(piece, parts[1 - me], out=piece)
            if scale:
                numpy.multiply(piece, half, out=piece)

    methods = {
        "raw, flat buffer, huge pages": lambda: raw([flat]),
        "raw, flat buffer, 4 KiB pages": lambda: raw([flat_small_pages]),
        "raw, 161 arrays in place": lambda: raw([g.reshape(-1) for g in grads]),
        "shared: copy": lambda: shared(add=False, scale=False),
        "shared: copy, add": lambda: shared(scale=False),
        "shared: copy, add, scale (chunked)": shared,
        "shared: add, scale (no copy)": lambda: shared(copy=False),
        "SharedWindow.mean, all 161 arrays": lambda: window.mean(
            numpy.dtype(numpy.float32), [g.reshape(-1) for g in grads], 0.5),
    }
    ms = interleaved_medians_ms(comm, methods, args.repeat)
    if comm.rank == 0:
        covered = sum(p.size for p in pieces) * 4 / 1e6
        print(f"chunk {args.chunk_bytes >> 10} KiB; shared rows cover the {len(pieces)} whole "
              f"chunks ({covered:.1f} MB); median of {args.repeat}, slowest rank")
        for name, t in ms.items():
            print(f"{name:38} {t:8.2f} ms")
        print(json.dumps({"chunk_bytes": args.chunk_bytes,
                          **{name: round(t, 2) for name, t in ms.items()}}))
    window.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
