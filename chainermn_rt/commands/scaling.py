"""``chainermn-rt scaling``: the scaling study as a chain of jobs, then a table and a plot.

    chainermn-rt scaling --site dgx-h100 --max-nodes 16 --out study/ --time 30
    chainermn-rt scaling --site sandbox --max-nodes 2 --gpus-per-node 2 --model mlp --out s/
    chainermn-rt scaling ... --dry-run     # render the scripts only
    chainermn-rt scaling ... --no-wait     # submit and return; rerun to collect

See chainermn_rt/scaling.py for the points, the record and the definitions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chainermn_rt import scaling
from chainermn_rt.commands.render import add_site_arguments, request_from, write_script
from chainermn_rt.errors import UserError
from chainermn_rt.files import write_atomically
from chainermn_rt.plan import make_plan
from chainermn_rt.render import render
from chainermn_rt.site import load_site, resolve_site

MODELS = ("resnet50", "mlp")


def configure(parser: argparse.ArgumentParser) -> None:
    add_site_arguments(parser, nodes=False)
    a = parser.add_argument
    a("--max-nodes", type=int, required=True, help="the largest point: 1, 2, 4 ... up to it")
    a("--out", type=Path, required=True,
      help="folder of the study: scripts, logs, results, scaling.{json,md,png}")
    a("--model", default="resnet50", choices=MODELS, help="default: %(default)s")
    a("--batchsize", type=int, default=32, help="per rank (weak scaling); default: %(default)s")
    a("--insize", type=int, help="ResNet-50 input size (default: the benchmark's, 224)")
    a("--iterations", type=int, default=100, help="timed iterations; default: %(default)s")
    a("--warmup", type=int, default=10, help="untimed first iterations; default: %(default)s")
    a("--dry-run", action="store_true", help="render every point's script; submit nothing")
    a("--no-wait", action="store_true", help="submit and return; a rerun collects")


def _bench_args(args: argparse.Namespace, result: Path) -> list[str]:
    argv = ["--model", args.model, "--batchsize", str(args.batchsize), "--iterations",
            str(args.iterations), "--warmup", str(args.warmup), "--output", str(result)]
    return argv + (["--insize", str(args.insize)] if args.insize else [])


def _scripts(args: argparse.Namespace, site, out: Path) -> dict[str, tuple]:
    """Every point's (Point, script text), planned before anything is written."""
    part = site.partition(args.partition)
    per_node = args.gpus_per_node or args.ranks_per_node or \
        (part.topology.gpus or len(part.topology.slots))
    found = {}
    for point in scaling.points(args.max_nodes, per_node):
        per = {"gpus_per_node": point.per_node} if part.topology.gpus else \
            {"ranks_per_node": point.per_node}
        probe = make_plan(site, request_from(args, nodes=point.nodes, command=("true",), **per))
        python = probe.rank_step[0]  # the interpreter the Plan chose runs the benchmark too
        command = (python, "-m", "chainermn_rt", "bench", "train",
                   *_bench_args(args, out / f"{point.name}.json"))
        plan = make_plan(site, request_from(
            args, nodes=point.nodes, command=command, job_name=f"scaling-{point.name}",
            log=str(out / f"{point.name}-%j.out"), **per))
        found[point.name] = (point, render(plan))
    return found


def run(args: argparse.Namespace) -> int:
    site = load_site(resolve_site(args.site), "--site")
    for flag in ("batchsize", "iterations"):
        if getattr(args, flag) < 1:
            raise UserError(f"--{flag}: {getattr(args, flag)}; allowed: 1 or more")
    if args.warmup < 0:
        raise UserError(f"--warmup: {args.warmup}; allowed: 0 or more")
    out = args.out.absolute()
    state = scaling.load_state(out) if out.is_dir() else {}
    if args.max_nodes > max(p.nodes for p in site.partitions):
        raise UserError(f"--max-nodes: {args.max_nodes}; allowed: up to the partition's nodes")
    planned = _scripts(args, site, out)
    out.mkdir(parents=True, exist_ok=True)
    for name, (_, text) in planned.items():
        write_script(text, out / f"{name}.sh")
    points = {name: point for name, (point, _) in planned.items()}
    if args.dry_run:
        for name in points:
            print(f"wrote {out / (name + '.sh')}")
        return 0
    from chainermn_rt.sandbox import slurm_for

    slurm = slurm_for(site)
    study = {"site": str(site.path), "model": args.model, "batch_per_rank": args.batchsize}
    previous = None
    for name, point in points.items():
        entry = state.get(name)
        if scaling.read_result(out / f"{name}.json") is not None:
            continue
        if entry and entry.get("job") and slurm.state(entry["job"]) is None:
            previous = entry["job"]  # still pending or running: wait for it, keep the chain
            print(f"{name}: job {previous} still in Slurm", flush=True)
            continue
        deps = [f"--dependency=afterany:{previous}"] if previous else []
        previous = slurm.submit(out / f"{name}.sh", deps, cwd=out)
        state[name] = scaling.point_record(point, previous)
        scaling.save_state(out, state, study)
        print(f"{name}: submitted job {previous} ({point.nodes} node(s) x {point.per_node})",
              flush=True)
    if args.no_wait:
        return 0
    results, missing = [], []
    for name, point in points.items():
        job = state.get(name, {}).get("job")
        if job and scaling.read_result(out / f"{name}.json") is None:
            final = slurm.wait(job)
            print(f"{name}: job {job} {final.state}, exit code {final.exit_code}", flush=True)
        found = scaling.read_result(out / f"{name}.json")
        if found is None:
            missing.append(name)
        else:
            results.append(scaling.Result(point, found))
    rows = scaling.table(results)
    text = scaling.markdown(rows)
    write_atomically(out / "scaling.md", lambda f: f.write(text))
    write_atomically(out / "table.json", lambda f: json.dump(rows, f, indent=1))
    if rows:
        scaling.plot(rows, out / "scaling.png",
                     f"{args.model}, {args.batchsize} per rank, site {site.name}")
    sys.stdout.write(text)
    if missing:
        print(f"no result for {', '.join(missing)}: see {out}/<point>-<job>.out; rerun to "
              "submit them again", file=sys.stderr)
        return 1
    print(f"wrote {out / 'scaling.md'}, {out / 'scaling.png'}")
    return 0
