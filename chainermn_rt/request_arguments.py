"""The arguments of a job request, shared by ``render``, ``submit``, ``doctor --site`` and
``scaling``: added to a parser here, read back into a :class:`~chainermn_rt.plan.Request`.

>>> from chainermn_rt.arguments import Parser
>>> parser = Parser(prog="demo")
>>> add_site_arguments(parser)
>>> request_from(parser.parse_args(["--site", "sandbox", "--nodes", "2"]), command=("true",))
... # doctest: +ELLIPSIS
Request(nodes=2, command=('true',), gpus_per_node=None, ...)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from chainermn_rt.arguments import integer
from chainermn_rt.errors import UserError
from chainermn_rt.job_request import LOG_PATTERN, Request
from chainermn_rt.sandbox import as_running
from chainermn_rt.site import SITE_VAR, Site, load_site, resolve_site


def add_site_arguments(parser: argparse.ArgumentParser, nodes: bool = True,
                       required: bool = True) -> None:
    """Where and with what a job runs: ``render``, ``submit``, ``doctor``, ``scaling``."""
    a = parser.add_argument
    installed = os.environ.get(SITE_VAR) or None  # set by an install's module
    a("--site", required=required and installed is None, default=installed,
      help=f"a site profile (.toml) or a shipped one's name (sandbox, ...); default: "
           f"${SITE_VAR} ({installed or 'not set'})")
    if nodes:
        a("--nodes", type=integer(1), required=required, help="number of nodes")
    a("--gpus-per-node", type=integer(0),
      help="GPUs (= ranks) per node; default: all of the partition's")
    a("--ranks-per-node", type=integer(1),
      help="ranks per node on CPU partitions; default: all slots")
    a("--partition", help="default: the profile's default partition")
    a("--time", help="time limit (Slurm format); default: the partition's limit")
    a("--image", help="container image (overrides container.image)")
    a("--runtime", help="container runtime (overrides container.runtime)")
    a("--launcher", help="srun or mpirun (overrides the profile)")
    a("--account")
    a("--qos")
    a("--mem", help="memory per node (Slurm format)")
    a("--python", help="interpreter on the compute nodes for the per-rank step")
    a("--env", action="append", default=[], metavar="KEY=VALUE",
      help="extra environment for every rank (repeatable; overrides the profile)")


def add_request_arguments(parser: argparse.ArgumentParser) -> None:
    """The whole job request of ``render`` and ``submit``."""
    add_site_arguments(parser)
    a = parser.add_argument
    a("--job-name", default="chainermn", help="default: %(default)s")
    a("--log", default=LOG_PATTERN, help="the job's log file pattern; default: %(default)s")
    a("--per-rank-logs", action="store_true", help="each rank writes %%x-%%j.rank<N>.out")
    a("--stage", action="append", default=[], metavar="PATH",
      help="copy this folder (absolute, on the shared file system) to every node's "
           "local_scratch before the ranks start, and remove the copy when the job ends "
           "(repeatable); ranks find it with chainermn_rt.staging.local_path(PATH)")
    a("--output", "-o", type=Path, help="write the script here (default: print it)")
    a("--dry-run", action="store_true", help="print what would be written; write nothing")
    a("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def site_from(args: argparse.Namespace) -> Site:
    """The profile ``--site`` names, validated; a sandbox profile with its running sandbox's
    node count in every partition (:func:`chainermn_rt.sandbox.as_running`)."""
    return as_running(load_site(resolve_site(args.site), "--site"))


def _env_pairs(items: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--env: {item!r}; allowed: KEY=VALUE")
        pairs.append((key, value))
    return tuple(pairs)


def request_from(args: argparse.Namespace, **fields) -> Request:
    """The Request of the parsed arguments; ``fields`` (e.g. ``nodes``, ``module``) replace or
    add to them."""
    values = dict(
        gpus_per_node=args.gpus_per_node, ranks_per_node=args.ranks_per_node,
        partition=args.partition, time=args.time, image=args.image, runtime=args.runtime,
        launcher=args.launcher, account=args.account, qos=args.qos, memory=args.mem,
        python=args.python, env=_env_pairs(args.env))
    if getattr(args, "nodes", None) is not None:
        values["nodes"] = args.nodes
    if hasattr(args, "job_name"):  # render's and submit's own arguments
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        values.update(command=tuple(command), job_name=args.job_name,
                      per_rank_logs=args.per_rank_logs, log=args.log, stage=tuple(args.stage))
    values.update(fields)
    return Request(**values)
