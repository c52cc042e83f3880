"""A loader worker: decodes the batches its pipe brings into the loader's shared memory.

Started by :class:`chainermn_rt.data.loader.Loader` as a fresh interpreter
(``python -m chainermn_rt.data.worker FD``), not forked: forking a rank after MPI and
InfiniBand are up is unsafe, and multiprocessing's spawn and forkserver methods would import
the training script again (and with it MPI). One thread each: ``OMP_NUM_THREADS=1``. The
messages in and out: ``worker_protocol``.
"""

from __future__ import annotations

import mmap
import os
import sys

import numpy

from chainermn_rt.data import jpeg
from chainermn_rt.data import worker_protocol as protocol
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
    """Serve the loader on the socket ``fd``: a ``Setup``, then its requests."""
    from multiprocessing.connection import Connection
    from multiprocessing.reduction import recv_handle

    conn = Connection(fd)
    try:
        setup: protocol.Setup = conn.recv()
        size = int(numpy.prod(setup.shape))
        with open(os.path.join(SHM, setup.memory.lstrip("/")), "r+b") as f:
            memory = mmap.mmap(f.fileno(), size)
        slots = numpy.ndarray(setup.shape, numpy.uint8, memory)
        files: dict[int, int] = {}  # the loader's name of a shard -> our descriptor of it
        while True:
            match conn.recv():
                case protocol.OpenShard(shard):
                    files[shard] = recv_handle(conn)
                case protocol.CloseShards(shards):
                    for shard in shards:
                        os.close(files.pop(shard))
                case protocol.Decode() as job:
                    conn.send(_decode(job, conn, files, slots, setup.transform))
                case protocol.Stop():
                    return
                case other:
                    raise TypeError(f"loader worker: {other!r} is no message of "
                                    "worker_protocol")
    except (EOFError, KeyboardInterrupt, BrokenPipeError, ConnectionResetError):
        pass  # the loader has gone


def _decode(job: protocol.Decode, conn, files: dict[int, int], slots: numpy.ndarray,
            transform) -> protocol.Decoded:
    """Decode ``job``'s images (``files``: the shards' descriptors) into its slot."""
    # images held by the loader came end to end in one message: sliced, not copied
    blob = memoryview(conn.recv_bytes()) if job.ends else None
    samples, start = [], 0
    for key, shard, ref, end in zip(job.keys, job.shards, job.refs,
                                    job.ends or [None] * len(job.keys), strict=True):
        if ref is None:
            data, start = blob[start:end], end
        else:
            data = _reader(files[ref.shard], ref.span, shard, key)
        samples.append((key, data, shard))
    try:
        decode_into(slots[job.slot], samples, transform, job.epochs)
    except (jpeg.DecodeError, DataError) as err:
        return protocol.Decoded(job.batch, str(err))
    return protocol.Decoded(job.batch)


def _reader(fd: int, span: Span, shard: str, key: str):
    return lambda: pread(fd, span, shard, key)


if __name__ == "__main__":
    main(int(sys.argv[1]))
