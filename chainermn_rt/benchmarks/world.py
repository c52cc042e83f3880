"""Where the benchmark's ranks run: what both benchmarks report besides their figures, and
the memory a node has for them."""

from __future__ import annotations

from pathlib import Path


def node_count(mpi_comm) -> int:
    """Distinct hosts among the ranks of ``mpi_comm``, by MPI processor name (collective)."""
    from mpi4py import MPI

    return len(set(mpi_comm.allgather(MPI.Get_processor_name())))


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes of memory this node can still give (``MemAvailable``), None where unknown."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
