"""Where the benchmark's ranks run: what both benchmarks report besides their figures."""

from __future__ import annotations


def node_count(mpi_comm) -> int:
    """Distinct hosts among the ranks of ``mpi_comm``, by MPI processor name (collective)."""
    from mpi4py import MPI

    return len(set(mpi_comm.allgather(MPI.Get_processor_name())))
