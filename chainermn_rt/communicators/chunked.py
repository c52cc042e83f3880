"""A CPU communicator that averages gradients in transport-friendly chunks.

ChainerMN's ``naive`` makes one MPI call per parameter and then scales each
gradient in a separate pass over memory; small arrays pay the per-call
latency, and a pass over ResNet-50's 102 MB costs about as much as half the
reduction on a small node. ``ChunkedCommunicator`` instead

- reduces every array in pieces of ``chunk_bytes`` (``bench/allreduce.py``
  sweeps the size), in place for arrays of at least half a chunk, so most
  bytes are never copied;
- with two ranks, reduces with an MPI operation that adds and scales in one
  step, while the data are in cache (two inputs: the sum is made exactly
  once, so ``(a + b) * (1/2)`` is what naive computes); with more ranks it
  sums, then scales each piece right after its reduction;
- packs the small arrays into one persistent, chunk-sized staging buffer that
  stays in cache, reduces it once per chunk and scales while copying out.

Results equal ``naive``'s bit for bit with two ranks (a sum of two numbers
does not depend on the order; with more ranks MPI's reduction order, which
changes with message size, may round differently). float16 travels as
float32 and is scaled in float16, like ``naive``.

Example (under ``mpirun -np 2``)::

    comm = ChunkedCommunicator(MPI.COMM_WORLD, chunk_bytes=1 << 20)
    comm.multi_node_mean_grad(model)            # or via chainermn:
    comm = chainermn.create_communicator("chunked")
"""

from __future__ import annotations

import numpy
from chainermn.communicators import _memory_utility, mpi_communicator_base
from mpi4py import MPI

# Fastest chunk size measured on the reference machine (bench/RESULTS.md).
DEFAULT_CHUNK_BYTES = 1 << 20

# dtype of a gradient -> dtype it travels as (MPI has no float16 reduction)
_TRANSPORT = {numpy.dtype(numpy.float16): numpy.dtype(numpy.float32),
              numpy.dtype(numpy.float32): numpy.dtype(numpy.float32),
              numpy.dtype(numpy.float64): numpy.dtype(numpy.float64)}


class ChunkedCommunicator(mpi_communicator_base.MpiCommunicatorBase):
    """ChainerMN communicator for NumPy (CPU) gradients; see the module docstring."""

    def __init__(self, mpi_comm=None, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        if mpi_comm is None:
            mpi_comm = MPI.COMM_WORLD
        super().__init__(mpi_comm)
        chunk_bytes = int(chunk_bytes)
        if chunk_bytes < 64:
            raise ValueError(f"chunk_bytes is {chunk_bytes}; allowed: at least 64")
        self.chunk_bytes = chunk_bytes
        self._staging: dict[numpy.dtype, _Staging] = {}
        self._mean_ops: dict[numpy.dtype, MPI.Op] = {}

    def split(self, color, key):
        return self.__class__(mpi_comm=self.mpi_comm.Split(color, key),
                              chunk_bytes=self.chunk_bytes)

    def multi_node_mean_grad(self, model, zero_fill=False):
        """Average every parameter's gradient over all ranks, in place (like ``naive``)."""
        grads = []
        for param in _memory_utility.extract_params_set_grad(model, zero_fill):
            if param.grad is None:  # only with zero_fill, as in naive
                param.grad = param.xp.zeros_like(param.data)
            grads.append(param.grad)
        self.multi_node_mean_arrays(grads)

    def multi_node_mean_arrays(self, arrays) -> None:
        """Replace each NumPy array by its mean over all ranks, in place."""
        scale = 1.0 / self.mpi_comm.size  # the same Python float naive multiplies by
        for array in arrays:
            if not isinstance(array, numpy.ndarray):
                raise TypeError(f"{type(self).__name__} averages NumPy arrays only, got "
                                f"{type(array).__name__}: use pure_nccl for GPU arrays")
            if array.dtype not in _TRANSPORT:
                raise TypeError(f"{type(self).__name__} does not support dtype {array.dtype}; "
                                f"allowed: {', '.join(str(d) for d in _TRANSPORT)}")
            if array.size == 0:
                continue
            if not array.flags.c_contiguous:
                flat = numpy.ascontiguousarray(array).reshape(-1)
                self._mean_flat(flat, scale)
                array[...] = flat.reshape(array.shape)
            else:
                self._mean_flat(array.reshape(-1), scale)
        for staging in self._staging.values():
            staging.flush(self.mpi_comm, scale)

    def _mean_op(self, dtype: numpy.dtype, scale: float):
        """With two ranks, an MPI operation computing ``(a + b) * scale``; else None."""
        if self.mpi_comm.size != 2:
            return None
        if dtype not in self._mean_ops:
            factor = dtype.type(scale)

            def add_and_scale(inbuf, inoutbuf, datatype, dtype=dtype, factor=factor):
                mine = numpy.frombuffer(inoutbuf, dtype)
                numpy.add(numpy.frombuffer(inbuf, dtype), mine, out=mine)
                numpy.multiply(mine, factor, out=mine)

            self._mean_ops[dtype] = MPI.Op.Create(add_and_scale, commute=True)
        return self._mean_ops[dtype]

    def _mean_flat(self, flat: numpy.ndarray, scale: float) -> None:
        transport = _TRANSPORT[flat.dtype]
        if transport == flat.dtype and flat.nbytes * 2 >= self.chunk_bytes:
            step = max(1, self.chunk_bytes // flat.itemsize)
            mean_op = self._mean_op(flat.dtype, scale)
            for start in range(0, flat.size, step):
                piece = flat[start:start + step]
                if mean_op is not None:
                    self.mpi_comm.Allreduce(MPI.IN_PLACE, piece, op=mean_op)
                else:
                    self.mpi_comm.Allreduce(MPI.IN_PLACE, piece)
                    numpy.multiply(piece, piece.dtype.type(scale), out=piece)
            return
        staging = self._staging.get(transport)
        if staging is None:
            staging = self._staging[transport] = _Staging(transport, self.chunk_bytes)
        staging.add(flat, self.mpi_comm, scale)


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
