"""``bench allreduce`` from checked arguments to its table, files and verdict.

:func:`check` runs before MPI starts (sizes, communicator names, output files, the memory the
largest size needs, the GPU a GPU-only communicator needs); :func:`run` runs on every started
rank: the GPU communicators every rank can run, the sweep (:func:`allreduce.sweep`), the table
and progress bar on rank 0, the files, and a JobFailed when an element came back wrong.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from chainermn_rt.arguments import output_file, parse_bytes
from chainermn_rt.benchmarks import allreduce
from chainermn_rt.benchmarks.world import check_fits, check_gpu
from chainermn_rt.communicators import GPU_ONLY
from chainermn_rt.errors import EnvironmentProblem, JobFailed, UserError

# Host memory of one rank's largest CPU allreduce, per byte of it: the buffer, its pattern
# and MPI's own copy (measured: bench/RESULTS.md)
HOST_FACTOR = 3


@dataclass(frozen=True)
class Sweep:
    """What to run: the sizes in bytes, the communicators (None: every one available)."""

    sizes: list[int]
    names: list[str] | None


def sizes(min_bytes: str, max_bytes: str) -> list[int]:
    low, high = parse_bytes(min_bytes, "--min-bytes"), parse_bytes(max_bytes, "--max-bytes")
    unit = allreduce.ITEMSIZE
    if low < unit or low % unit:
        raise UserError(f"--min-bytes: {min_bytes}; allowed: a multiple of {unit} "
                        f"({allreduce.DTYPE}), at least {unit}")
    if high < low:
        raise UserError(f"--max-bytes: {max_bytes}; allowed: at least --min-bytes "
                        f"({min_bytes})")
    return allreduce.sizes(low, high)


def requested(text: str | None) -> list[str] | None:
    """The names of ``--communicators`` in order, or None for "every one available"."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",")]
    for name in names:
        if name not in allreduce.COMMUNICATORS:
            raise UserError(f"--communicators: {name!r}; allowed: a comma-separated list of "
                            f"{', '.join(allreduce.COMMUNICATORS)}")
    return list(dict.fromkeys(names))


def check(min_bytes: str, max_bytes: str, communicators: str | None, output: Path | None,
          plot: Path | None) -> Sweep:
    """The sweep the arguments ask for; UserError (EnvironmentProblem for a missing
    matplotlib) naming the argument before anything starts."""
    sweep = Sweep(sizes(min_bytes, max_bytes), requested(communicators))
    output_file(output, "--output", (".json", ".csv"))
    output_file(plot, "--plot", (".png",))
    if plot and importlib.util.find_spec("matplotlib") is None:
        raise EnvironmentProblem("--plot needs matplotlib: pip install 'chainermn-rt[plot]'")
    if sweep.names:
        check_gpu(sweep.names, "--communicators",
                  [n for n in allreduce.COMMUNICATORS if n not in GPU_ONLY])
    if sweep.names is None or any(n not in GPU_ONLY for n in sweep.names):
        check_fits(HOST_FACTOR * sweep.sizes[-1], "--max-bytes", max_bytes)
    return sweep


def gpu_communicators(rank, names: list[str] | None) -> list[str]:
    """The GPU communicators to run (every rank agrees), after making this rank's GPU
    current. ``rank``: a started rank (:func:`chainermn_rt.runtime.start_rank`)."""
    from mpi4py import MPI

    wanted = allreduce.GPU_COMMUNICATORS if names is None else \
        [n for n in names if n in allreduce.GPU_COMMUNICATORS]
    if not wanted:
        return []
    try:
        gpu = rank.gpu()
    except UserError:
        if names is not None:
            raise  # asked for explicitly: say why it cannot run
        gpu = None
    if not rank.mpi_comm.allreduce(gpu is not None, op=MPI.LAND):
        if names is not None:
            raise UserError("--communicators: pure_nccl needs a GPU on every rank; allowed "
                            "here: mpi, naive, chunked")
        return []
    import cupy

    cupy.cuda.Device(gpu).use()
    return list(wanted)


def run(rank, sweep: Sweep, repeat: int, warmup: int, output: Path | None = None,
        plot: Path | None = None, progress: bool = False) -> int:
    """The sweep on every rank of ``rank``'s job; rank 0 prints the table and writes the
    files. Exit status 0, or JobFailed naming each wrong (communicator, size)."""
    from tqdm import tqdm

    from chainermn_rt.benchmarks import allreduce_report as report
    from chainermn_rt.benchmarks.world import node_count

    comm = rank.mpi_comm
    gpu_names = gpu_communicators(rank, sweep.names)
    names = sweep.names if sweep.names is not None else [
        n for n in allreduce.COMMUNICATORS
        if n not in allreduce.GPU_COMMUNICATORS or n in gpu_names]
    root, ranks, nodes = comm.Get_rank() == 0, comm.Get_size(), node_count(comm)
    context = {"ranks": ranks, "nodes": nodes, "type": allreduce.DTYPE, "repeat": repeat,
               "warmup": warmup, "communicators": names}
    show = (lambda line: tqdm.write(line, file=sys.stdout)) if root else (lambda line: None)
    for line in report.table_header(ranks, nodes, repeat, warmup):
        show(line)
    bar = tqdm(total=len(sweep.sizes) * len(names), desc="bench allreduce", unit="test",
               file=sys.stderr, disable=not root or not (progress or sys.stderr.isatty()))
    found = []
    with bar:
        for m in allreduce.sweep(comm, sweep.sizes, names, repeat, warmup):
            found.append(m)
            show(report.table_row(m))
            bar.set_postfix_str(f"{report.human_bytes(m.nbytes)} {m.communicator}",
                                refresh=False)
            bar.update()
    for line in report.table_footer(found):
        show(line)
    sys.stdout.flush()
    wrong = sum(m.wrong for m in found)
    if not root:
        return 1 if wrong else 0
    if output:
        report.write(output, found, context)
    if plot:
        report.plot(plot, found, f"allreduce busbw, {ranks} ranks on {nodes} "
                                 f"node{'s' if nodes != 1 else ''}")
    if wrong:
        bad = sorted({(m.communicator, m.nbytes) for m in found if m.wrong})
        raise JobFailed(f"{wrong} wrong elements after allreduce: " +
                        ", ".join(f"{name} at {size} B" for name, size in bad))
    return 0
