"""``chainermn-rt bench allreduce|train``: benchmarks every rank runs (mpirun, srun, a job).

    mpirun -np 2 chainermn-rt bench allreduce --max-bytes 64M --output ar.csv --plot ar.png
    srun --mpi=pmix chainermn-rt bench train --model resnet50 --batchsize 32 --output t.json
    chainermn-rt submit --site dgx-h100 --nodes 2 -- chainermn-rt bench allreduce

Rank 0 prints and writes; arguments are checked before MPI starts. What is timed:
chainermn_rt/benchmarks/allreduce.py and train.py; docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

from chainermn_rt.arguments import integer, output_file
from chainermn_rt.benchmarks import allreduce, train
from chainermn_rt.communicators import GPU_ONLY
from chainermn_rt.communicators import NAMES as COMMUNICATOR_NAMES
from chainermn_rt.errors import EnvironmentProblem, JobFailed, UserError

_BYTES = re.compile(r"([0-9]{1,16})([KMG]?)", re.IGNORECASE)
_UNITS = {"": 0, "K": 10, "M": 20, "G": 30}
MAX_BYTES = 1 << 40
# Host memory of one rank's largest CPU allreduce, per byte of it: the buffer, its pattern
# and MPI's own copy (measured: bench/RESULTS.md)
ALLREDUCE_HOST_FACTOR = 3


def parse_bytes(text: str, flag: str) -> int:
    """``8``, ``64K``, ``1G`` (1024-based) -> bytes; anything else a UserError naming ``flag``.

    >>> parse_bytes("64k", "--max-bytes"), parse_bytes("1G", "--max-bytes")
    (65536, 1073741824)
    """
    match = _BYTES.fullmatch(text)
    value = int(match.group(1)) << _UNITS[match.group(2).upper()] if match else -1
    if not 0 <= value <= MAX_BYTES:
        raise UserError(f"{flag}: {text!r}; allowed: a whole number of bytes up to 1024G, "
                        "optionally with K, M or G (1024-based), e.g. 8, 64K, 1G")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK",
                                parser_class=type(parser))
    help_text = ("allreduce bandwidth per size and communicator, nccl-tests style, with a "
                 "correctness check")
    a = sub.add_parser("allreduce", help=help_text, description=help_text).add_argument
    a("--min-bytes", default="8", help="smallest size (K, M, G: 1024-based); default: 8")
    a("--max-bytes", default="1G", help="largest size; sizes double from --min-bytes; "
                                         "default: 1G")
    a("--repeat", type=integer(1), default=allreduce.REPEAT,
      help="timed calls per size (the median is reported); default: %(default)s")
    a("--warmup", type=integer(0), default=allreduce.WARMUP,
      help="untimed calls per size first; default: %(default)s")
    a("--communicators", metavar="LIST",
      help=f"comma-separated, of {', '.join(allreduce.COMMUNICATORS)}; default: every one "
           "available here (pure_nccl only when every rank has a GPU with NCCL)")
    a("--output", type=Path, metavar="FILE", help="also write the results (.json or .csv)")
    a("--plot", type=Path, metavar="FILE.png",
      help="busbw against size, one line per communicator (needs chainermn-rt[plot])")
    a("--progress", action="store_true",
      help="progress bar on stderr even when it is not a terminal")

    help_text = "training throughput (images/s) of a model on synthetic data"
    a = sub.add_parser("train", help=help_text, description=help_text).add_argument
    a("--model", default="resnet50", choices=train.MODELS, help="default: %(default)s")
    a("--batchsize", type=integer(1, train.MAX_BATCH), default=32,
      help="per rank; default: %(default)s")
    a("--insize", type=integer(*train.INSIZES), default=224,
      help="ResNet-50 input side (mlp: ignored); default: %(default)s")
    a("--iterations", type=integer(1), default=100,
      help="timed iterations; default: %(default)s")
    a("--warmup", type=integer(0), default=10,
      help="untimed iterations first; default: %(default)s")
    a("--communicator", default="auto", choices=COMMUNICATOR_NAMES,
      help="default: auto (what chainermn_rt.setup() chooses: pure_nccl on GPUs, else "
           "chunked)")
    a("--output", type=Path, metavar="FILE.json", help="also write the JSON line's object")
    a("--seed", type=integer(*train.SEEDS), default=0,
      help="initial parameters and synthetic data (plus rank)")


def run(args: argparse.Namespace) -> int:
    return _allreduce(args) if args.benchmark == "allreduce" else _train(args)


# -- checks before MPI starts ---------------------------------------------------------------

def _local_ranks() -> int:
    """Ranks on this node, as the launcher says (1 when it does not)."""
    from chainermn_rt.job_env import JobEnvironment

    return JobEnvironment.detect().local_size or 1


def _fits(need: int, flag: str, value) -> None:
    """UserError naming ``flag`` when this node's ranks would need more memory than it has."""
    from chainermn_rt.benchmarks.world import available_memory

    have, ranks = available_memory(), _local_ranks()
    if have is not None and need * ranks > have:
        raise UserError(f"{flag}: {value} needs about {need * ranks / 2**30:.1f} GiB for "
                        f"{ranks} rank(s) here, {have / 2**30:.1f} GiB is available; allowed: "
                        "a smaller value")


def _sizes(args) -> list[int]:
    low, high = parse_bytes(args.min_bytes, "--min-bytes"), parse_bytes(args.max_bytes,
                                                                         "--max-bytes")
    unit = allreduce.ITEMSIZE
    if low < unit or low % unit:
        raise UserError(f"--min-bytes: {args.min_bytes}; allowed: a multiple of {unit} "
                        f"({allreduce.DTYPE}), at least {unit}")
    if high < low:
        raise UserError(f"--max-bytes: {args.max_bytes}; allowed: at least --min-bytes "
                        f"({args.min_bytes})")
    return allreduce.sizes(low, high)


def _requested_communicators(text: str | None) -> list[str] | None:
    """The names of ``--communicators`` in order, or None for "every one available"."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",")]
    for name in names:
        if name not in allreduce.COMMUNICATORS:
            raise UserError(f"--communicators: {name!r}; allowed: a comma-separated list of "
                            f"{', '.join(allreduce.COMMUNICATORS)}")
    return list(dict.fromkeys(names))


def _needs_gpu(names: list[str], flag: str, allowed: list[str]) -> None:
    from chainermn_rt.communicators import nccl_gpu_available

    gpu_only = [n for n in names if n in GPU_ONLY]
    if gpu_only and not nccl_gpu_available():
        raise UserError(f"{flag}: {gpu_only[0]} needs a GPU with CuPy and NCCL; allowed "
                        f"here: {', '.join(allowed)}")


def _check_allreduce(args) -> tuple[list[int], list[str] | None]:
    sizes = _sizes(args)
    names = _requested_communicators(args.communicators)
    output_file(args.output, "--output", (".json", ".csv"))
    output_file(args.plot, "--plot", (".png",))
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise EnvironmentProblem("--plot needs matplotlib: pip install 'chainermn-rt[plot]'")
    if names:
        _needs_gpu(names, "--communicators",
                   [n for n in allreduce.COMMUNICATORS if n not in GPU_ONLY])
    if names is None or any(n not in GPU_ONLY for n in names):
        _fits(ALLREDUCE_HOST_FACTOR * sizes[-1], "--max-bytes", args.max_bytes)
    return sizes, names


def _check_train(args) -> None:
    output_file(args.output, "--output", (".json",))
    _needs_gpu([args.communicator], "--communicator",
               [n for n in COMMUNICATOR_NAMES if n not in GPU_ONLY])
    if args.communicator not in GPU_ONLY:
        from chainermn_rt.communicators import nccl_gpu_available

        if args.communicator != "auto" or not nccl_gpu_available():  # trains on the CPU
            _fits(train.host_bytes(args.model, args.batchsize, args.insize), "--batchsize",
                  args.batchsize)


# -- MPI ------------------------------------------------------------------------------------

def _start():
    """This rank, started as chainermn_rt.setup() starts one (launcher, MPI, abort hook)."""
    from chainermn_rt.job_env import LauncherMismatch
    from chainermn_rt.runtime import start_rank

    try:
        return start_rank()
    except LauncherMismatch as err:
        raise EnvironmentProblem(str(err)) from None


def _gpu_communicators(rank, names: list[str] | None) -> list[str]:
    """The GPU communicators to run, after making this rank's GPU current."""
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


def _allreduce(args) -> int:
    sizes, names = _check_allreduce(args)
    from tqdm import tqdm

    from chainermn_rt.benchmarks import allreduce_report as report
    from chainermn_rt.benchmarks.world import node_count

    rank = _start()
    comm = rank.mpi_comm
    gpu_names = _gpu_communicators(rank, names)
    if names is None:
        names = [n for n in allreduce.COMMUNICATORS
                 if n not in allreduce.GPU_COMMUNICATORS or n in gpu_names]
    root, ranks, nodes = comm.Get_rank() == 0, comm.Get_size(), node_count(comm)
    context = {"ranks": ranks, "nodes": nodes, "type": allreduce.DTYPE, "repeat": args.repeat,
               "warmup": args.warmup, "communicators": names}
    show = (lambda line: tqdm.write(line, file=sys.stdout)) if root else (lambda line: None)
    for line in report.table_header(ranks, nodes, args.repeat, args.warmup):
        show(line)
    bar = tqdm(total=len(sizes) * len(names), desc="bench allreduce", unit="test",
               file=sys.stderr, disable=not root or not (args.progress or sys.stderr.isatty()))
    found = []
    with bar:
        for m in allreduce.sweep(comm, sizes, names, args.repeat, args.warmup):
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
    if args.output:
        report.write(args.output, found, context)
    if args.plot:
        report.plot(args.plot, found, f"allreduce busbw, {ranks} ranks on {nodes} "
                                      f"node{'s' if nodes != 1 else ''}")
    if wrong:
        bad = sorted({(m.communicator, m.nbytes) for m in found if m.wrong})
        raise JobFailed(f"{wrong} wrong elements after allreduce: " +
                        ", ".join(f"{name} at {size} B" for name, size in bad))
    return 0


def _train(args) -> int:
    _check_train(args)
    import numpy

    import chainermn_rt
    from chainermn_rt.communicators import resolve_name

    try:
        comm, device = chainermn_rt.setup(args.communicator)
    except chainermn_rt.LauncherMismatch as err:
        raise EnvironmentProblem(str(err)) from None
    name = resolve_name(args.communicator, gpu=device.xp is not numpy)
    result = train.run(comm, device, name, model=args.model, batchsize=args.batchsize,
                       insize=args.insize, iterations=args.iterations, warmup=args.warmup,
                       seed=args.seed)
    if comm.rank == 0:
        line = json.dumps(result)
        sys.stdout.write(f"{train.summary(result)}\n{line}\n")
        sys.stdout.flush()
        if args.output:
            from chainermn_rt.files import write_atomically

            write_atomically(args.output, lambda f: f.write(line + "\n"))
    return 0
