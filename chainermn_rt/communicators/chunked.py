"""A CPU communicator that averages gradients in transport-friendly chunks.

ChainerMN's ``naive`` makes one MPI call per parameter and then scales each
gradient in a separate pass over memory: small arrays pay the per-call latency
and the extra pass costs about as much as half the reduction. ``chunked``
streams all gradients through chunks of ``chunk_bytes`` (``bench/allreduce.py``
sweeps the size) and scales each chunk while it is in cache, by one of two
exchanges:

- ``SharedWindow`` (``shared_window.py``) when all ranks share one node's memory
  and there are at most ``SHARED_MAX_RANKS`` of them: copies into two
  persistent shared-memory buffers per rank, no MPI messages;
- ``MpiChunks`` (``mpi_chunks.py``) otherwise: in-place chunked ``Allreduce``
  plus a staging buffer for small arrays.

Results equal ``naive``'s bit for bit with two ranks (a sum of two numbers
does not depend on the order; with more ranks MPI's reduction order, which
changes with message size, may round differently). float16 travels as
float32 and is scaled in float16, like ``naive``.

Example (under ``mpirun -np 2``)::

    comm = ChunkedCommunicator(MPI.COMM_WORLD, chunk_bytes=1 << 18)
    comm.multi_node_mean_grad(model)            # or via chainermn:
    comm = chainermn.create_communicator("chunked")
"""

from __future__ import annotations

import numpy
from chainermn.communicators import _memory_utility, mpi_communicator_base
from mpi4py import MPI

from chainermn_rt.communicators.mpi_chunks import MpiChunks
from chainermn_rt.communicators.shared_window import SharedWindow

# Fastest chunk size measured on the reference machine (bench/RESULTS.md).
DEFAULT_CHUNK_BYTES = 1 << 18
# Above this many ranks, each reading every other rank's buffer costs more
# memory traffic than MPI's logarithmic or ring algorithms (reasoned from the
# traffic, not measured: the reference machine has two cores).
SHARED_MAX_RANKS = 4

# dtype of a gradient -> dtype it travels as (MPI has no float16 reduction)
_TRANSPORT = {numpy.dtype(numpy.float16): numpy.dtype(numpy.float32),
              numpy.dtype(numpy.float32): numpy.dtype(numpy.float32),
              numpy.dtype(numpy.float64): numpy.dtype(numpy.float64)}


class ChunkedCommunicator(mpi_communicator_base.MpiCommunicatorBase):
    """ChainerMN communicator for NumPy (CPU) gradients; see the module docstring.

    ``shared_memory``: None chooses by where the ranks are; True or False forces
    the exchange (True needs all ranks on one node; one rank always uses MPI).
    """

    def __init__(self, mpi_comm=None, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 shared_memory: bool | None = None):
        if mpi_comm is None:
            mpi_comm = MPI.COMM_WORLD
        super().__init__(mpi_comm)
        chunk_bytes = int(chunk_bytes)
        if chunk_bytes < 64:
            raise ValueError(f"chunk_bytes is {chunk_bytes}; allowed: at least 64")
        self.chunk_bytes = chunk_bytes
        self.shared_memory = shared_memory
        self.exchange = self._choose_exchange(shared_memory)

    def _choose_exchange(self, shared_memory: bool | None):
        size = self.mpi_comm.size
        if size < 2 or shared_memory is False or (shared_memory is None
                                                   and size > SHARED_MAX_RANKS):
            return MpiChunks(self.mpi_comm, self.chunk_bytes)
        node = self.mpi_comm.Split_type(MPI.COMM_TYPE_SHARED)
        if node.size == size:
            try:
                return SharedWindow(node, self.chunk_bytes)
            except MPI.Exception:  # an MPI without shared-memory windows: same on all ranks
                if shared_memory:
                    raise
        node.Free()
        if shared_memory:
            raise ValueError(f"shared_memory=True, but the {size} ranks span more than one "
                             f"node; allowed: False or None")
        return MpiChunks(self.mpi_comm, self.chunk_bytes)

    def split(self, color, key):
        return self.__class__(mpi_comm=self.mpi_comm.Split(color, key),
                              chunk_bytes=self.chunk_bytes, shared_memory=self.shared_memory)

    def finalize(self):
        """Release the exchange's window or MPI operations (collective)."""
        super().finalize()
        self.exchange.free()

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
        by_transport: dict[numpy.dtype, list[numpy.ndarray]] = {}
        copied = []  # (array, contiguous copy) for arrays that are not C-contiguous
        for array in arrays:
            if not isinstance(array, numpy.ndarray):
                raise TypeError(f"{type(self).__name__} averages NumPy arrays only, got "
                                f"{type(array).__name__}: use pure_nccl for GPU arrays")
            if array.dtype not in _TRANSPORT:
                raise TypeError(f"{type(self).__name__} does not support dtype {array.dtype}; "
                                f"allowed: {', '.join(str(d) for d in _TRANSPORT)}")
            if array.size == 0:
                continue
            if array.flags.c_contiguous:
                flat = array.reshape(-1)
            else:
                flat = numpy.ascontiguousarray(array).reshape(-1)
                copied.append((array, flat))
            by_transport.setdefault(_TRANSPORT[array.dtype], []).append(flat)
        scale = 1.0 / self.mpi_comm.size  # the same Python float naive multiplies by
        for transport, flats in by_transport.items():
            self.exchange.mean(transport, flats, scale)
        for array, flat in copied:
            array[...] = flat.reshape(array.shape)
