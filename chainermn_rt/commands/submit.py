"""``chainermn-rt submit``: render, submit with sbatch, optionally wait for the final state."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from chainermn_rt import jobs
from chainermn_rt.commands.render import add_request_arguments, script_from, write_script


def configure(parser: argparse.ArgumentParser) -> None:
    add_request_arguments(parser)
    parser.add_argument("--wait", action="store_true",
                        help="wait for the job and exit 0 only if it COMPLETED")


def run(args: argparse.Namespace) -> int:
    text = script_from(args)
    if args.dry_run:
        print(text, end="")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = args.output or Path(tmp) / "job.sh"
        write_script(text, path)
        job_id = jobs.submit(path)
    print(f"submitted job {job_id}")
    if not args.wait:
        return 0
    result = jobs.wait(job_id)
    print(f"job {job_id}: {result.state}, exit code {result.exit_code}")
    return 0 if result.state == "COMPLETED" and result.exit_code == 0 else 1
