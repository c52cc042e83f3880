"""The ``chainermn-rt`` command: parses arguments and hands them to the modules that do the work.

Each sub-command lives in a module under ``chainermn_rt.commands`` exposing
``configure(parser)`` and ``run(args) -> int``; modules are imported only when
their command runs, so ``chainermn-rt rank`` starts fast on every rank.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from chainermn_rt.arguments import Parser
from chainermn_rt.errors import EXIT_STATUSES, EnvironmentProblem, JobFailed, UserError, print_line

DESCRIPTION = ("Run ChainerMN data-parallel training on Slurm: site profiles, job scripts,\n"
               "the per-rank step, a local Slurm sandbox, checks and benchmarks.")
EPILOG = "exit statuses:\n" + "\n".join(f"  {code}  {what}" for code, what in EXIT_STATUSES.items())

# name -> (module under chainermn_rt.commands, one-line help)
COMMANDS = {
    "site": ("site", "check: validate a site profile (--live: and compare it with the "
                     "cluster); init: write one from what the cluster reports"),
    "install": ("install", "lay the bundle out under a prefix for a site, with module files"),
    "render": ("render", "render an sbatch script from a site profile and a job request"),
    "submit": ("submit", "render, submit with sbatch, optionally wait for the final state"),
    "rank": ("rank", "per-rank step: bind GPU, CPUs and HCA, then exec the command"),
    "sandbox": ("sandbox", "the local multi-node Slurm sandbox: up, down, status"),
    "doctor": ("doctor", "check the stack here or in an image; with --site, a cluster by a "
                         "real job: ranks, versions, GPUs, binding, allreduce, bandwidth"),
    "env": ("env", "print what the launcher says about this rank (JobEnvironment)"),
    "bench": ("bench", "allreduce: nccl-tests style sweep of every communicator; train: "
                       "images/s of a model on synthetic data"),
    "snapshots": ("snapshots", "check the snapshot sets a resumable job wrote (OUT/snapshots)"),
    "scaling": ("scaling", "the paper's scaling study: train benchmark jobs at 1 GPU and "
                           "1, 2, 4 ... N nodes, a table and a plot"),
    "data": ("data", "stage: copy a folder (of shards) to node-local storage, checked"),
    "timeline": ("timeline", "merge a job's per-rank step records into one Chrome trace "
                             "(Perfetto); name the slow node"),
    "report": ("report", "a job's step records as one HTML page: throughput, step phases per "
                         "rank, the slowest rank per step, parallel efficiency"),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError

    from chainermn_rt import version

    try:
        return version()
    except PackageNotFoundError:  # a checkout that is not installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="chainermn-rt", description=DESCRIPTION, epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=Parser)
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # First pass: find the command; second: let its module add its own arguments.
    known, _ = parser.parse_known_args(argv[:1] or argv)
    module = importlib.import_module(f"chainermn_rt.commands.{COMMANDS[known.command][0]}")
    sub_parser = parser._subparsers._group_actions[0].choices[known.command]  # noqa: SLF001
    module.configure(sub_parser)
    args = parser.parse_args(argv)
    try:
        return int(module.run(args) or 0)
    except BrokenPipeError:  # `| head`: the reader has gone; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (UserError, JobFailed, EnvironmentProblem) as err:
        if not getattr(err, "everywhere", False) or _first_rank():
            print_line(f"chainermn-rt {known.command}: error: {err}")
        return err.exit_status


def _first_rank() -> bool:
    from chainermn_rt.job_env import first_rank

    return first_rank()


if __name__ == "__main__":
    sys.exit(main())
