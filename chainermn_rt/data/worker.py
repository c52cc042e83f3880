"""A loader worker: decodes the batches its pipe brings into the loader's shared memory.

Started by :class:`chainermn_rt.data.loader.Loader` as a fresh interpreter
(``python -m chainermn_rt.data.worker FD``), not forked: forking a rank after MPI and
InfiniBand are up is unsafe, and multiprocessing's spawn and forkserver methods would import
the training script again (and with it MPI). One thread each: ``OMP_NUM_THREADS=1``.
Messages in: ``("fd", id)`` then a shard's descriptor (SCM_RIGHTS: nothing is opened again),
``("close", ids)``, ``(batch, slot, epochs, keys, shards, refs, ends)`` (each sample's epoch: a
batch may straddle two; ``refs[i]``: ``(id, offset, size)`` of an image the worker reads itself
from a shard, or None for one that follows in the next message, the images held by the loader
end to end at ``ends``), or None to end. Out:
``(batch, None)`` when done, ``(batch, "one line")`` when a sample cannot be decoded.
"""

from __future__ import annotations

import mmap
import os
import sys

import numpy

from chainermn_rt.data import jpeg
from chainermn_rt.data.shards import DataError, Span, pread

SHM = "/dev/shm"


def decode_into(out: numpy.ndarray, samples, transform, epochs) -> None:
    """Decode ``samples`` ((key, encoded image or a function giving it, shard) each, of
    ``epochs``) into ``out[i]`` with ``transform``'s box; DecodeError carries
    ``shard: sample key: what``."""
    height, width = out.shape[1:3]
    for i, ((key, data, shard), epoch) in enumerate(zip(samples, epochs, strict=True)):
        if callable(data):
            data = data()
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
    from multiprocessing.reduction import recv_handle

    conn = Connection(fd)
    try:
        shm_name, shape, transform = conn.recv()
        size = int(numpy.prod(shape))
        with open(os.path.join(SHM, shm_name.lstrip("/")), "r+b") as f:
            memory = mmap.mmap(f.fileno(), size)
        slots = numpy.ndarray(shape, numpy.uint8, memory)
        files: dict[int, int] = {}  # the loader's id of a shard -> our descriptor of it
        while (message := conn.recv()) is not None:
            if message[0] == "fd":
                files[message[1]] = recv_handle(conn)
                continue
            if message[0] == "close":
                for ident in message[1]:
                    os.close(files.pop(ident))
                continue
            batch, slot, epochs, keys, shards, refs, ends = message
            # images held by the loader came end to end in one message: sliced, not copied
            blob = memoryview(conn.recv_bytes()) if ends else None
            samples, start = [], 0
            for key, shard, ref, end in zip(keys, shards, refs, ends or [None] * len(keys),
                                            strict=True):
                if ref is None:
                    data, start = blob[start:end], end
                else:
                    data = _reader(files[ref[0]], Span(*ref[1:]), shard, key)
                samples.append((key, data, shard))
            try:
                decode_into(slots[slot], samples, transform, epochs)
            except (jpeg.DecodeError, DataError) as err:
                conn.send((batch, str(err)))
            else:
                conn.send((batch, None))
    except (EOFError, KeyboardInterrupt, BrokenPipeError, ConnectionResetError):
        pass  # the loader has gone


def _reader(fd: int, span: Span, shard: str, key: str):
    return lambda: pread(fd, span, shard, key)


if __name__ == "__main__":
    main(int(sys.argv[1]))
