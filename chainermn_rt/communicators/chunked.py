"""A CPU communicator that averages gradients in transport-friendly chunks.

ChainerMN's ``naive`` makes one MPI call per parameter: small arrays pay the
per-call latency and large ones (>= 64 MB) fall off Open MPI's shared-memory
bandwidth cliff. ``ChunkedCommunicator`` instead

- reduces every array in pieces of ``chunk_bytes`` (the size the transport
  moves fastest; ``bench/allreduce.py`` measures it), in place for arrays
  that are at least half a chunk, so most bytes are never copied;
- packs the small arrays into one persistent, chunk-sized staging buffer,
  which stays in cache between calls, and reduces it once per chunk;
- scales each piece by ``1/size`` right after its reduction, while it is hot.

Results equal ``naive``'s bit for bit with two ranks (a sum of two numbers
does not depend on the order; with more ranks MPI's reduction order, which
changes with message size, may round differently). float16 travels as
float32, like ``naive``.

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

    def _mean_flat(self, flat: numpy.ndarray, scale: float) -> None:
        transport = _TRANSPORT[flat.dtype]
        if transport == flat.dtype and flat.nbytes * 2 >= self.chunk_bytes:
            step = max(1, self.chunk_bytes // flat.itemsize)
            for start in range(0, flat.size, step):
                piece = flat[start:start + step]
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
