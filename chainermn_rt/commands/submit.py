"""``chainermn-rt submit``: render, submit with sbatch, optionally wait for the final state."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from chainermn_rt.commands.render import add_request_arguments, script_from, write_script
from chainermn_rt.sandbox import slurm_for


def configure(parser: argparse.ArgumentParser) -> None:
    add_request_arguments(parser)
    parser.add_argument("--wait", action="store_true",
                        help="wait for the job and exit 0 only if it COMPLETED with exit code 0")
    parser.add_argument("--wait-timeout", type=float, metavar="SECONDS",
                        help="with --wait: give up waiting after this long (exit 1; the job "
                             "goes on); default: no limit")


def run(args: argparse.Namespace) -> int:
    site, text = script_from(args)
    if args.dry_run:
        print(text, end="")
        return 0
    slurm = slurm_for(site)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.output or Path(tmp) / "job.sh"
        write_script(text, path)
        job_id = slurm.submit(path)
    print(f"submitted job {job_id}", flush=True)
    if not args.wait:
        return 0
    result = slurm.wait(job_id, timeout=args.wait_timeout)
    print(f"job {job_id}: {result.state}, exit code {result.exit_code}")
    return 0 if result == ("COMPLETED", 0) else 1
