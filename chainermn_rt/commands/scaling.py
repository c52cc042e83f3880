"""``chainermn-rt scaling``: the scaling study as a chain of jobs, then a table and a plot.

    chainermn-rt scaling --site dgx-h100 --max-nodes 16 --out study/ --time 30
    chainermn-rt scaling --site sandbox --max-nodes 2 --gpus-per-node 2 --model mlp --out s/
    chainermn-rt scaling ... --dry-run     # render the scripts only
    chainermn-rt scaling ... --no-wait     # submit and return; rerun to collect

This command plans every point (its arguments to Plans); chainermn_rt/scaling.py submits the
chain, collects, and has the points, the record and the definitions.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from chainermn_rt import scaling
from chainermn_rt.arguments import folder, integer
from chainermn_rt.benchmarks import train
from chainermn_rt.errors import UserError
from chainermn_rt.plan import make_plan
from chainermn_rt.request_arguments import add_site_arguments, request_from, site_from
from chainermn_rt.site import Site
from chainermn_rt.submission import Cluster, write_script


def configure(parser: argparse.ArgumentParser) -> None:
    add_site_arguments(parser, nodes=False)
    a = parser.add_argument
    a("--max-nodes", type=integer(1), required=True,
      help="the largest point: 1, 2, 4 ... up to it")
    a("--out", type=Path, required=True,
      help="folder of the study: scripts, logs, results, scaling.{json,md,png}")
    a("--model", default="resnet50", choices=train.MODELS, help="default: %(default)s")
    a("--batchsize", type=integer(1, train.MAX_BATCH), default=32,
      help="per rank (weak scaling); default: %(default)s")
    a("--insize", type=integer(*train.INSIZES),
      help="ResNet-50 input size (default: the benchmark's, 224)")
    a("--iterations", type=integer(1), default=100, help="timed iterations; default: %(default)s")
    a("--warmup", type=integer(0), default=10,
      help="untimed first iterations; default: %(default)s")
    a("--dry-run", action="store_true", help="render every point's script; submit nothing")
    a("--no-wait", action="store_true", help="submit and return; a rerun collects")


def _bench_args(args: argparse.Namespace, result: Path) -> tuple[str, ...]:
    argv = ("bench", "train", "--model", args.model, "--batchsize", str(args.batchsize),
            "--iterations", str(args.iterations), "--warmup", str(args.warmup), "--output",
            str(result))
    return argv + (("--insize", str(args.insize)) if args.insize else ())


def _plans(args: argparse.Namespace, site: Site, out: Path) -> dict[str, tuple]:
    """Every point's (Point, Plan), decided before anything is written."""
    part = site.partition(args.partition)
    if args.max_nodes > part.nodes:
        raise UserError(f"--max-nodes: {args.max_nodes}; allowed: 1-{part.nodes} (the nodes "
                        f"of partition {part.name!r})")
    per_node = args.gpus_per_node or args.ranks_per_node or \
        (part.topology.gpus or len(part.topology.slots))
    found = {}
    for point in scaling.points(args.max_nodes, per_node):
        per = {"gpus_per_node": point.per_node} if part.topology.gpus else \
            {"ranks_per_node": point.per_node}
        plan = make_plan(site, request_from(
            args, nodes=point.nodes, module="chainermn_rt",
            command=_bench_args(args, out / f"{point.name}.json"),
            job_name=f"scaling-{point.name}", log=str(out / f"{point.name}-%j.out"), **per))
        found[point.name] = (point, plan)
    return found


def run(args: argparse.Namespace) -> int:
    out = folder(args.out, "--out")
    site = site_from(args)
    state = scaling.load_state(out) if out.is_dir() else {}
    planned = _plans(args, site, out)
    cluster = None if args.dry_run else Cluster.of(site)  # unreachable: nothing written
    out.mkdir(exist_ok=True)
    if args.dry_run:
        for name, (_, plan) in planned.items():
            print(f"wrote {write_script(plan, out / (name + '.sh'))}")
        return 0
    scaling.submit_chain(cluster, planned, state, out, {
        "site": str(site.path), "model": args.model, "batch_per_rank": args.batchsize})
    if args.no_wait:
        return 0
    return scaling.collect(cluster, planned, state, out,
                           f"{args.model}, {args.batchsize} per rank, site {site.name}")
