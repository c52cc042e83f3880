"""How often the slow-node rule advises excluding a node, the old rule against the new, on the
sandbox (2 nodes x 2 ranks): ``make demo``'s MNIST job, whose nodes are alike (any advice is a
false alarm), and the same job slowed for real on node2 (its ranks under a CPU quota,
tests/cpu_quota.py, as tests/test_timeline_sandbox.py does: the advice must name node2 only).

Both rules are computed from the same records (``chainermn-rt report``'s tables): the *old*
one (until issue 40) named a rank whose compute ratio or whose wait passed its threshold; the
*new* one (chainermn_rt/timeline/straggler.py) needs both the wait and its own slowness. Per
run it prints the rank 0 line of the job, what each rule named and each rank's scores; at the
end one JSON line. Needs the sandbox up (``make sandbox-up``) and root (the quota's cgroup).

Run: ``python -m bench.straggler_false_alarms [--demos 10] [--throttled 3] [--keep DIR]``
(``--keep``: the jobs' folders, records included, are left in DIR)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy

from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.rank_contract import TIMELINE_FOLDER
from chainermn_rt.render import render
from chainermn_rt.sandbox import Sandbox
from chainermn_rt.site import load_site
from chainermn_rt.submission import Cluster
from chainermn_rt.timeline import merge, straggler
from examples.sandbox_demo import run_demo

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from cpu_quota import cpu_quota  # noqa: E402

PREFIX = "chainermn-rt: slow node: "
# tests/test_timeline_sandbox.py's
WORKLOAD = "--unit 100 --batchsize 1000 --n-train 4000 --n-test 400"


def old_rule(v: straggler.Verdict) -> bool:
    """The rule before issue 40: either score alone named a rank."""
    return v.steps >= straggler.MIN_STEPS and (v.ratio >= straggler.SLOW_RATIO
                                               or v.wait >= straggler.WAIT_SHARE)


def judged(folder: Path, printed: str) -> dict:
    """Both rules over one job's records; rank 0's own line."""
    run = merge.load(folder)
    hosts = run.hosts()
    tables = merge.tables(run)
    judge = tables.judge()
    scores = judge.scores()
    keep = tables.index >= straggler.WARMUP
    phases = {**tables.phases, "step": tables.step}
    line = next((ln.strip() for ln in printed.splitlines() if ln.strip().startswith(PREFIX)),
                "")
    return {"job": folder.name, "printed": line, "records": judge.line(hosts),
            "old": sorted({hosts[v.rank] for v in scores if old_rule(v)}),
            "new": judge.hosts(hosts),
            "scores": [{"rank": v.rank, "host": hosts[v.rank], "ratio": round(v.ratio, 3),
                        "wait": round(v.wait, 4),
                        "excess": {k: round(x, 4) for k, x in v.excess.items()},
                        "median_ms": {k: round(float(numpy.median(x[v.rank, keep])) * 1e3, 3)
                                      for k, x in phases.items()}}
                       for v in scores]}


def demo(sandbox: Sandbox, out: Path) -> dict:
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        status = run_demo(sandbox, out, 100)
    if status != 0:
        sys.exit(f"bench: the demo failed:\n{text.getvalue()}")
    [folder] = (out / TIMELINE_FOLDER).iterdir()
    return judged(folder, text.getvalue())


def throttled(sandbox: Sandbox, out: Path, quota: bool = True,
              workload: tuple[str, ...] = ()) -> dict:
    """The sandbox test's job: node2's ranks (2, 3) run a quarter of the time (``quota``;
    without it, the same job as it runs unslowed)."""
    python = sys.executable
    with cpu_quota(0.25) if quota else contextlib.nullcontext() as cgroup:
        slow = ("--slow-rank", "2", "3", "--slow-cgroup", str(cgroup)) if quota else ()
        plan = make_plan(load_site(REPO / "slurm" / "sites" / "sandbox.toml"), Request(
            nodes=2, gpus_per_node=2, time="10", job_name="mnist-throttled", timeline=True,
            env=(("OMP_NUM_THREADS", "1"),), command=(
                python, str(REPO / "tests" / "programs" / "timeline_mnist.py"),
                "--iterations", "60", *workload, "--no-progress", "--log-every", "20", *slow,
                "--out", str(out / "result"))))
        script = out / "throttled.sh"
        script.write_text(render(plan))
        done = Cluster(sandbox.site, sandbox.client()).run(
            script, cwd=out, started=" ranks, communicator ", timeout=900, say=lambda _: None)
    if done.state != ("COMPLETED", 0):
        sys.exit(f"bench: the throttled job ended {done.state}:\n{done.text}")
    return judged(out / TIMELINE_FOLDER / done.job, done.text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demos", type=int, default=10)
    parser.add_argument("--throttled", type=int, default=3)
    parser.add_argument("--unthrottled", type=int, default=0,
                        help="runs of the throttled job without its quota, between them")
    parser.add_argument("--keep", type=Path, help="leave the jobs' folders here")
    parser.add_argument("--workload", default=WORKLOAD,
                        help="the throttled job's MNIST arguments (default: %(default)s)")
    args = parser.parse_args()
    sandbox = Sandbox.from_profile()
    sandbox.client()  # says how to start it when it is down
    runs: dict[str, list[dict]] = {"demo": [], "throttled": [], "unthrottled": []}
    with tempfile.TemporaryDirectory() as tmp:
        if args.keep:
            tmp = str(args.keep.absolute())
        jobs = [("demo", i, demo) for i in range(args.demos)]
        workload = tuple(args.workload.split())
        for i in range(max(args.throttled, args.unthrottled)):  # in turn: the load hits both
            jobs += [("throttled", i, partial(throttled, workload=workload))] * (
                i < args.throttled)
            jobs += [("unthrottled", i, partial(throttled, quota=False, workload=workload))] * (
                i < args.unthrottled)
        for kind, i, one in jobs:
            out = Path(tmp) / f"{kind}-{i}"
            out.mkdir(parents=True)
            row = one(sandbox, out)
            runs[kind].append(row)
            print(f"{kind} {i} (job {row['job']}): old rule names {row['old'] or 'none'}, "
                  f"new rule {row['new'] or 'none'}\n  rank 0: {row['printed']}\n"
                  + "".join(f"  rank {s['rank']} {s['host']}: compute {s['ratio']:.2f}x, "
                            f"wait {s['wait']:.1%}, excess {s['excess']}, median ms "
                            f"{s['median_ms']}\n"
                            for s in row["scores"]), end="", flush=True)
    summary = {
        "demo": {"runs": len(runs["demo"]),
                 "old_advised": sum(bool(r["old"]) for r in runs["demo"]),
                 "new_advised": sum(bool(r["new"]) for r in runs["demo"])},
        "throttled": {"runs": len(runs["throttled"]),
                      "old_named_node2_only": sum(r["old"] == ["node2"]
                                                  for r in runs["throttled"]),
                      "new_named_node2_only": sum(r["new"] == ["node2"]
                                                  for r in runs["throttled"])},
        "unthrottled": {"runs": len(runs["unthrottled"]),
                        "old_advised": sum(bool(r["old"]) for r in runs["unthrottled"]),
                        "new_advised": sum(bool(r["new"]) for r in runs["unthrottled"])},
        "printed_as_the_records": sum(r["printed"] == r["records"]
                                      for rs in runs.values() for r in rs),
    }
    print(json.dumps({"summary": summary, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
