"""Averaging among the ranks of one node through shared memory, without MPI messages.

Each rank owns two chunk-sized buffers in an MPI-3 shared window. Per chunk, every
rank copies its next piece of gradient into its buffer (which also brings that
piece of its own gradient into cache), all ranks meet at a barrier, and each
rank writes ``(buffer_0 + buffer_1 + ...) * scale`` back into its gradient, adding
the buffers in rank order. Large arrays go through whole chunks of their own;
their tails and the small arrays are gathered into shared chunks.

Every rank computes the same numbers from the same inputs in the same order:
results are identical on all ranks, and with two ranks equal to a sum made by
MPI (``a + b == b + a``). The two buffers alternate, so one barrier per chunk
suffices: a rank overwrites a buffer only after every rank has passed the barrier
that follows its last read of it.

Example (every rank of a one-node communicator)::

    window = SharedWindow(node_comm, chunk_bytes=1 << 18)
    window.mean(numpy.dtype("float32"), [grad.reshape(-1) for grad in grads], 0.5)
    window.free()                                 # collective, like creating it
"""

from __future__ import annotations

import numpy
from mpi4py import MPI


class SharedWindow:
    """Two chunk-sized buffers per rank of ``node_comm`` in one shared window (see the module
    docstring)."""

    def __init__(self, node_comm, chunk_bytes: int):
        self.comm = node_comm
        self.chunk_bytes = chunk_bytes
        self.buffer_bytes = -(-chunk_bytes // 64) * 64  # each buffer cache-line aligned
        info = MPI.Info.Create()
        info.Set("alloc_shared_noncontig", "true")  # each rank's buffers page-aligned, near it
        self.win = MPI.Win.Allocate_shared(2 * self.buffer_bytes, 1, info=info, comm=node_comm)
        info.Free()
        self.win.Lock_all()  # one passive epoch for the window's life; Sync() orders accesses
        self.memory = [numpy.frombuffer(self.win.Shared_query(r)[0], numpy.uint8)
                       for r in range(node_comm.size)]
        self.turn = 0  # which of the two buffers the next chunk uses
        self._scratch: dict[numpy.dtype, numpy.ndarray] = {}  # a batch's sum, per dtype

    def free(self) -> None:
        """Release the window and the node's communicator (collective)."""
        self.memory.clear()
        self.win.Unlock_all()
        self.win.Free()
        self.comm.Free()

    def mean(self, transport: numpy.dtype, flats, scale: float) -> None:
        """Replace each 1-D contiguous array by its mean over the ranks, in place.

        ``transport`` is the dtype summed in (float16 arrays are summed as float32,
        cast back, then scaled in float16, as ChainerMN's ``naive`` does).
        """
        buffers = self.views(transport)
        step = buffers[0][0].size
        me, factor = self.comm.rank, transport.type(scale)
        batch: list[tuple[numpy.ndarray, int]] = []  # (piece of a gradient, offset in buffer)
        used = 0
        for flat in flats:
            start = 0
            if flat.dtype == transport:  # whole chunks first, straight from the array
                while flat.size - start >= step:
                    piece = flat[start:start + step]
                    start += step
                    parts = buffers[self.turn]
                    parts[me][:] = piece
                    self.barrier()
                    self._mean_chunk(piece, parts, factor)
            while start < flat.size:  # the rest (a tail, a small or a float16 array) waits
                piece = flat[start:start + step - used]
                start += piece.size
                batch.append((piece, used))
                used += piece.size
                if used == step:
                    self._mean_batch(buffers[self.turn], batch, used, scale)
                    batch, used = [], 0
        if batch:
            self._mean_batch(buffers[self.turn], batch, used, scale)

    def views(self, transport: numpy.dtype) -> list[list[numpy.ndarray]]:
        """``views(dtype)[turn][rank]``: that rank's buffer for that turn, a chunk of ``dtype``."""
        size = self.chunk_bytes // transport.itemsize * transport.itemsize
        return [[m[turn * self.buffer_bytes:][:size].view(transport) for m in self.memory]
                for turn in (0, 1)]

    def barrier(self) -> None:
        """All ranks have filled this turn's buffers; switch turns."""
        self.win.Sync()
        self.comm.Barrier()
        self.win.Sync()
        self.turn ^= 1

    def _mean_chunk(self, piece: numpy.ndarray, parts, factor) -> None:
        """piece = (parts[0] + parts[1] + ...) * factor, where parts[rank] holds piece's copy."""
        me = self.comm.rank
        if me < 2:
            # piece equals parts[me] and is still in cache: adding into it in place is
            # the fastest form, and piece + other == parts[0] + parts[1]
            numpy.add(piece, parts[1 - me], out=piece)
        else:
            numpy.add(parts[0], parts[1], out=piece)
        for part in parts[2:]:
            numpy.add(piece, part, out=piece)
        numpy.multiply(piece, factor, out=piece)

    def _mean_batch(self, parts, batch, used: int, scale: float) -> None:
        """Pieces of several arrays: one buffer's worth, summed once, scaled while copied out."""
        me = self.comm.rank
        for piece, offset in batch:
            parts[me][offset:offset + piece.size] = piece
        self.barrier()
        total = self._scratch.get(parts[0].dtype)
        if total is None:
            total = self._scratch[parts[0].dtype] = numpy.empty_like(parts[0])
        total = total[:used]
        numpy.add(parts[0][:used], parts[1][:used], out=total)
        for part in parts[2:]:
            numpy.add(total, part[:used], out=total)
        for piece, offset in batch:
            summed = total[offset:offset + piece.size]
            if piece.dtype == summed.dtype:
                numpy.multiply(summed, summed.dtype.type(scale), out=piece)
            else:  # float16: cast back, then scale in float16
                piece[...] = summed
                numpy.multiply(piece, piece.dtype.type(scale), out=piece)
