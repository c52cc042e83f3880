"""A loader worker: decodes the batches its pipe brings into the loader's shared memory.

Started by :class:`chainermn_rt.data.loader.Loader` as a fresh interpreter
(``python -m chainermn_rt.data.worker FD``), not forked: forking a rank after MPI and
InfiniBand are up is unsafe, and multiprocessing's spawn and forkserver methods would import
the training script again (and with it MPI). One thread each: ``OMP_NUM_THREADS=1``.
Messages in: ``(batch, slot, epochs, [(key, data, shard), ...])`` (each sample's epoch: a batch
may straddle two), or None to end; out:
``(batch, None)`` when done, ``(batch, "one line")`` when a sample cannot be decoded.
"""

from __future__ import annotations

import mmap
import os
import sys

import numpy

from chainermn_rt.data import jpeg

SHM = "/dev/shm"


def decode_into(out: numpy.ndarray, samples, transform, epochs) -> None:
    """Decode ``samples`` ((key, data, shard) each, of ``epochs``) into ``out[i]`` with
    ``transform``'s box; DecodeError carries ``shard: sample key: what``."""
    height, width = out.shape[1:3]
    for i, ((key, data, shard), epoch) in enumerate(zip(samples, epochs, strict=True)):
        try:
            w, h = jpeg.header(data)[:2]
            box, flip = transform.box(w, h, key, epoch)
            jpeg.decode(data, (width, height), box, flip, out[i])
        except jpeg.DecodeError as err:
            raise jpeg.DecodeError(f"{shard}: sample {key!r}: {err}") from None


def main(fd: int) -> None:
    """Serve the loader on the socket ``fd``: first ``(shared memory name, slots' shape,
    transform)``, then batches."""
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    try:
        shm_name, shape, transform = conn.recv()
        size = int(numpy.prod(shape))
        with open(os.path.join(SHM, shm_name.lstrip("/")), "r+b") as f:
            memory = mmap.mmap(f.fileno(), size)
        slots = numpy.ndarray(shape, numpy.uint8, memory)
        while (message := conn.recv()) is not None:
            batch, slot, epochs, samples = message
            try:
                decode_into(slots[slot], samples, transform, epochs)
            except jpeg.DecodeError as err:
                conn.send((batch, str(err)))
            else:
                conn.send((batch, None))
    except (EOFError, KeyboardInterrupt, BrokenPipeError, ConnectionResetError):
        pass  # the loader has gone


if __name__ == "__main__":
    main(int(sys.argv[1]))
