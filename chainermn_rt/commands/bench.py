"""``chainermn-rt bench allreduce|train``: benchmarks every rank runs (mpirun, srun, a job).

    mpirun -np 2 chainermn-rt bench allreduce --max-bytes 64M --output ar.csv --plot ar.png
    srun --mpi=pmix chainermn-rt bench train --model resnet50 --batchsize 32 --output t.json
    chainermn-rt submit --site dgx-h100 --nodes 2 -- chainermn-rt bench allreduce

Rank 0 prints and writes; arguments are checked before MPI starts. The runs:
chainermn_rt/benchmarks/allreduce_run.py and train.py; docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chainermn_rt.arguments import integer, output_file
from chainermn_rt.benchmarks import allreduce, allreduce_run, train
from chainermn_rt.communicators import NAMES as COMMUNICATOR_NAMES
from chainermn_rt.errors import EnvironmentProblem


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


def _start():
    """This rank, started as chainermn_rt.setup() starts one (launcher, MPI, abort hook)."""
    from chainermn_rt.job_env import LauncherMismatch
    from chainermn_rt.runtime import start_rank

    try:
        return start_rank()
    except LauncherMismatch as err:
        raise EnvironmentProblem(str(err)) from None


def _allreduce(args) -> int:
    sweep = allreduce_run.check(args.min_bytes, args.max_bytes, args.communicators,
                                args.output, args.plot)
    return allreduce_run.run(_start(), sweep, args.repeat, args.warmup, args.output,
                             args.plot, args.progress)


def _train(args) -> int:
    output_file(args.output, "--output", (".json",))
    train.check(args.model, args.batchsize, args.insize, args.communicator)
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
