"""Where the benchmark's ranks run: what both benchmarks report besides their figures, and
the memory a node has for them."""

from __future__ import annotations

from pathlib import Path

from chainermn_rt.errors import UserError


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


def local_ranks() -> int:
    """Ranks on this node, as the launcher says (1 when it does not)."""
    from chainermn_rt.job_env import JobEnvironment

    return JobEnvironment.detect().local_size or 1


def check_fits(need: int, flag: str, value) -> None:
    """UserError naming ``flag`` when this node's ranks would need more memory than it has."""
    have, ranks = available_memory(), local_ranks()
    if have is not None and need * ranks > have:
        raise UserError(f"{flag}: {value} needs about {need * ranks / 2**30:.1f} GiB for "
                        f"{ranks} rank(s) here, {have / 2**30:.1f} GiB is available; allowed: "
                        "a smaller value")


def check_gpu(names: list[str], flag: str, allowed: list[str]) -> None:
    """UserError naming ``flag`` when a GPU-only communicator is asked for with no GPU here."""
    from chainermn_rt.communicators import GPU_ONLY, nccl_gpu_available

    gpu_only = [n for n in names if n in GPU_ONLY]
    if gpu_only and not nccl_gpu_available():
        raise UserError(f"{flag}: {gpu_only[0]} needs a GPU with CuPy and NCCL; allowed "
                        f"here: {', '.join(allowed)}")
