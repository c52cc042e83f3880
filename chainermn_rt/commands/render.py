"""``chainermn-rt render``: a site profile + a job request -> an sbatch script."""

from __future__ import annotations

import argparse
import sys

from chainermn_rt.arguments import output_file
from chainermn_rt.plan import make_plan
from chainermn_rt.render import render
from chainermn_rt.request_arguments import add_request_arguments, request_from, site_from
from chainermn_rt.submission import write_script


def configure(parser: argparse.ArgumentParser) -> None:
    add_request_arguments(parser)


def run(args: argparse.Namespace) -> int:
    output_file(args.output, "--output")
    plan = make_plan(site_from(args), request_from(args))
    if args.output is None or args.dry_run:
        sys.stdout.write(render(plan))
        if args.output is not None:
            print(f"# dry run: would write {args.output}", file=sys.stderr)
        return 0
    write_script(plan, args.output)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
