"""Averaging through MPI ``Allreduce`` calls on chunk-sized pieces (any ranks, any nodes).

- Arrays of at least half a chunk are reduced in place, piece by piece, so most
  bytes are never copied;
- with two ranks the reduction uses an MPI operation that adds and scales in
  one step, while the data are in cache (two inputs: the sum is made exactly
  once, so ``(a + b) * (1/2)`` is what naive computes); with more ranks it
  sums, then scales each piece right after its reduction;
- small arrays are packed into one persistent, chunk-sized staging buffer that
  stays in cache, reduced once per chunk and scaled while copied out.

Example (every rank of ``mpi_comm``)::

    chunks = MpiChunks(mpi_comm, chunk_bytes=1 << 20)
    chunks.mean(numpy.dtype("float32"), [grad.reshape(-1) for grad in grads], 0.5)
"""

from __future__ import annotations

import numpy
from mpi4py import MPI


class MpiChunks:
    """Chunked in-place ``Allreduce`` with a staging buffer (see the module docstring)."""

    def __init__(self, mpi_comm, chunk_bytes: int):
        self.comm = mpi_comm
        self.chunk_bytes = chunk_bytes
        self._staging: dict[numpy.dtype, _Staging] = {}
        self._mean_ops: dict[numpy.dtype, MPI.Op] = {}

    def free(self) -> None:
        for op in self._mean_ops.values():
            op.Free()
        self._mean_ops.clear()

    def mean(self, transport: numpy.dtype, flats, scale: float) -> None:
        """Replace each 1-D contiguous array by its mean over the ranks, in place.

        ``transport`` is the dtype reduced in (float16 arrays travel as float32,
        are cast back, then scaled in float16, as ChainerMN's ``naive`` does).
        """
        staging = None
        for flat in flats:
            if flat.dtype == transport and flat.nbytes * 2 >= self.chunk_bytes:
                self._mean_in_place(flat, scale)
                continue
            if staging is None:
                staging = self._staging.get(transport)
                if staging is None:
                    staging = self._staging[transport] = _Staging(transport, self.chunk_bytes)
            staging.add(flat, self.comm, scale)
        if staging is not None:
            staging.flush(self.comm, scale)

    def _mean_in_place(self, flat: numpy.ndarray, scale: float) -> None:
        step = max(1, self.chunk_bytes // flat.itemsize)
        mean_op = self._mean_op(flat.dtype, scale)
        for start in range(0, flat.size, step):
            piece = flat[start:start + step]
            if mean_op is not None:
                self.comm.Allreduce(MPI.IN_PLACE, piece, op=mean_op)
            else:
                self.comm.Allreduce(MPI.IN_PLACE, piece)
                numpy.multiply(piece, piece.dtype.type(scale), out=piece)

    def _mean_op(self, dtype: numpy.dtype, scale: float):
        """With two ranks, an MPI operation computing ``(a + b) * scale``; else None."""
        if self.comm.size != 2:
            return None
        if dtype not in self._mean_ops:
            factor = dtype.type(scale)

            def add_and_scale(inbuf, inoutbuf, datatype, dtype=dtype, factor=factor):
                mine = numpy.frombuffer(inoutbuf, dtype)
                numpy.add(numpy.frombuffer(inbuf, dtype), mine, out=mine)
                numpy.multiply(mine, factor, out=mine)

            self._mean_ops[dtype] = MPI.Op.Create(add_and_scale, commute=True)
        return self._mean_ops[dtype]


class _Staging:
    """A persistent chunk-sized buffer that gathers small arrays for one reduction."""

    def __init__(self, dtype: numpy.dtype, chunk_bytes: int):
        self.buffer = numpy.empty(max(1, chunk_bytes // dtype.itemsize), dtype)
        self.used = 0
        self.pending: list[tuple[numpy.ndarray, int]] = []  # (destination piece, offset)

    def add(self, flat: numpy.ndarray, mpi_comm, scale: float) -> None:
        start = 0
        while start < flat.size:
            if self.used == self.buffer.size:
                self.flush(mpi_comm, scale)
            piece = flat[start:start + self.buffer.size - self.used]
            self.buffer[self.used:self.used + piece.size] = piece
            self.pending.append((piece, self.used))
            self.used += piece.size
            start += piece.size

    def flush(self, mpi_comm, scale: float) -> None:
        if not self.used:
            return
        reduced = self.buffer[:self.used]
        mpi_comm.Allreduce(MPI.IN_PLACE, reduced)
        for piece, offset in self.pending:
            part = reduced[offset:offset + piece.size]
            if piece.dtype == part.dtype:  # scale while copying out: one pass
                numpy.multiply(part, part.dtype.type(scale), out=piece)
            else:  # float16: cast back, then scale in float16, exactly as naive does
                piece[...] = part
                numpy.multiply(piece, piece.dtype.type(scale), out=piece)
        self.pending.clear()
        self.used = 0
