"""``chainermn-rt render``: a site profile + a job request -> an sbatch script."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from chainermn_rt.errors import UserError
from chainermn_rt.plan import LOG_PATTERN, Request, make_plan
from chainermn_rt.render import render
from chainermn_rt.site import Site, load_site, resolve_site


def add_request_arguments(parser: argparse.ArgumentParser) -> None:
    """The job request, shared by ``render`` and ``submit``."""
    a = parser.add_argument
    a("--site", required=True, help="a site profile (.toml) or a shipped one's name (sandbox, ...)")
    a("--nodes", type=int, required=True, help="number of nodes")
    a("--gpus-per-node", type=int, help="GPUs (= ranks) per node; default: all of the partition's")
    a("--ranks-per-node", type=int, help="ranks per node on CPU partitions; default: all slots")
    a("--partition", help="default: the profile's default partition")
    a("--time", help="time limit (Slurm format); default: the partition's limit")
    a("--job-name", default="chainermn", help="default: %(default)s")
    a("--image", help="container image (overrides container.image)")
    a("--runtime", help="container runtime (overrides container.runtime)")
    a("--launcher", help="srun or mpirun (overrides the profile)")
    a("--account")
    a("--qos")
    a("--mem", help="memory per node (Slurm format)")
    a("--python", help="interpreter on the compute nodes for the per-rank step")
    a("--env", action="append", default=[], metavar="KEY=VALUE",
      help="extra environment for every rank (repeatable; overrides the profile)")
    a("--log", default=LOG_PATTERN, help="the job's log file pattern; default: %(default)s")
    a("--per-rank-logs", action="store_true", help="each rank writes %%x-%%j.rank<N>.out")
    a("--output", "-o", type=Path, help="write the script here (default: print it)")
    a("--dry-run", action="store_true", help="print what would be written; write nothing")
    a("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def configure(parser: argparse.ArgumentParser) -> None:
    add_request_arguments(parser)


def request_from(args: argparse.Namespace) -> Request:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    env = []
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--env: {item!r}; allowed: KEY=VALUE")
        env.append((key, value))
    return Request(
        nodes=args.nodes, command=tuple(command), gpus_per_node=args.gpus_per_node,
        ranks_per_node=args.ranks_per_node, partition=args.partition, time=args.time,
        job_name=args.job_name, image=args.image, runtime=args.runtime, launcher=args.launcher,
        account=args.account, qos=args.qos, memory=args.mem, python=args.python,
        env=tuple(env), per_rank_logs=args.per_rank_logs, log=args.log)


def script_from(args: argparse.Namespace) -> tuple[Site, str]:
    """The site profile and the rendered script."""
    site = load_site(resolve_site(args.site), "--site")
    return site, render(make_plan(site, request_from(args)))


def write_script(text: str, path: Path) -> None:
    """Write atomically (never half-written), executable."""
    path = path.resolve()
    if not path.parent.is_dir():
        raise UserError(f"--output: {path.parent} is not a directory; allowed: a path in an "
                        "existing directory")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def run(args: argparse.Namespace) -> int:
    _, text = script_from(args)
    if args.output is None or args.dry_run:
        sys.stdout.write(text)
        if args.output is not None:
            print(f"# dry run: would write {args.output}", file=sys.stderr)
        return 0
    write_script(text, args.output)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
