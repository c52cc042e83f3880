"""``chainermn-rt submit``: render, submit with sbatch, optionally wait for the final state."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from chainermn_rt.arguments import output_file, seconds
from chainermn_rt.plan import make_plan
from chainermn_rt.render import render
from chainermn_rt.request_arguments import add_request_arguments, request_from, site_from
from chainermn_rt.submission import Cluster


def configure(parser: argparse.ArgumentParser) -> None:
    add_request_arguments(parser)
    parser.add_argument("--wait", action="store_true",
                        help="wait for the job and exit 0 only if it COMPLETED with exit code 0")
    parser.add_argument("--wait-timeout", type=seconds(), metavar="SECONDS",
                        help="with --wait: give up waiting after this long (exit 1; the job "
                             "goes on); default: no limit")


def run(args: argparse.Namespace) -> int:
    output_file(args.output, "--output")
    site = site_from(args)
    plan = make_plan(site, request_from(args))
    if args.dry_run:
        sys.stdout.write(render(plan))
        return 0
    cluster = Cluster.of(site)
    with tempfile.TemporaryDirectory() as tmp:
        script = args.output or Path(tmp) / "job.sh"
        job = cluster.submit(plan, script.absolute(), cwd=Path.cwd())  # the job runs here
    print(f"submitted job {job}", flush=True)
    if not args.wait:
        return 0
    result = cluster.wait(job, timeout=args.wait_timeout)
    print(f"job {job}: {result.state}, exit code {result.exit_code}")
    return 0 if result == ("COMPLETED", 0) else 1
