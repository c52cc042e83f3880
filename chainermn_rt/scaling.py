"""The paper's scaling study: the train benchmark at 1 GPU and at 1, 2, 4 ... N nodes.

Each point is a job rendered by the same generator as training jobs, running
``chainermn-rt bench train --output OUT/<point>.json``; the jobs form a dependency chain
(one after another, so they never compete). ``OUT/scaling.json`` records what was submitted,
so a rerun waits for jobs still pending or running, resubmits only points that ended without
a result, and skips those done. Results are a table (GPUs, images/s, speed-up, parallel
efficiency relative to one GPU and to one node: the paper's two definitions) and a plot.

>>> [p.name for p in points(max_nodes=8, per_node=4)]
['1gpu', '1node', '2nodes', '4nodes', '8nodes']
>>> rows = table([Result(points(2, 2)[0], 100.0), Result(points(2, 2)[1], 190.0),
...               Result(points(2, 2)[2], 360.0)])
>>> [(r["gpus"], r["speedup"], r["efficiency_vs_1gpu"], r["efficiency_vs_1node"]) for r in rows]
[(1, 1.0, 1.0, None), (2, 1.9, 0.95, 1.0), (4, 3.6, 0.9, 0.9473684210526315)]
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from chainermn_rt import plotting
from chainermn_rt.errors import UserError
from chainermn_rt.files import read_small, write_atomically

STATE = "scaling.json"
MAX_RECORD_BYTES = 1 << 20  # scaling.json and a point's result are a few hundred bytes
_JOB = re.compile(r"\d+")


@dataclass(frozen=True)
class Point:
    """One job of the study: ``nodes`` x ``per_node`` ranks (one per GPU on GPU partitions)."""

    name: str
    nodes: int
    per_node: int

    @property
    def ranks(self) -> int:
        return self.nodes * self.per_node


@dataclass(frozen=True)
class Result:
    point: Point
    images_per_s: float


def points(max_nodes: int, per_node: int) -> list[Point]:
    """1 GPU (one rank), then 1, 2, 4 ... nodes up to ``max_nodes`` (which is always in)."""
    if max_nodes < 1 or per_node < 1:
        raise UserError(f"--max-nodes: {max_nodes}; allowed: 1 or more")
    counts = [1]
    while counts[-1] * 2 <= max_nodes:
        counts.append(counts[-1] * 2)
    if counts[-1] != max_nodes:
        counts.append(max_nodes)
    found = [Point("1gpu", 1, 1)] if per_node > 1 else []
    return found + [Point("1node" if n == 1 else f"{n}nodes", n, per_node) for n in counts]


def table(results: list[Result]) -> list[dict]:
    """Rows in GPU order; speed-up and efficiencies where their reference point was measured."""
    results = sorted(results, key=lambda r: (r.point.ranks, r.point.nodes))
    one_gpu = next((r.images_per_s for r in results if r.point.ranks == 1), None)
    one_node = next((r for r in results if r.point.nodes == 1 and r.point.name != "1gpu"), None)
    rows = []
    for r in results:
        p = r.point
        per_gpu = one_gpu and r.images_per_s / one_gpu
        rows.append({
            "point": p.name, "nodes": p.nodes, "gpus": p.ranks, "images_per_s": r.images_per_s,
            "speedup": per_gpu,
            "efficiency_vs_1gpu": per_gpu and per_gpu / p.ranks,
            "efficiency_vs_1node": (r.images_per_s / (p.nodes * one_node.images_per_s)
                                    if one_node and p.per_node == one_node.point.per_node
                                    else None)})
    return rows


def markdown(rows: list[dict]) -> str:
    """The table as Markdown (what bench/RESULTS.md and the terminal show)."""
    def cell(value, fmt):
        return "-" if value is None else format(value, fmt)

    lines = ["| GPUs | nodes | images/s | speed-up | efficiency vs 1 GPU | efficiency vs 1 node |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['gpus']} | {r['nodes']} | {r['images_per_s']:.1f} | "
                     f"{cell(r['speedup'], '.2f')} | {cell(r['efficiency_vs_1gpu'], '.1%')} | "
                     f"{cell(r['efficiency_vs_1node'], '.1%')} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path, title: str) -> None:
    """Throughput against GPUs on log-log axes with the ideal line from one GPU, as in the
    ChainerMN paper's scaling figure; each point labelled with its efficiency."""
    gpus = [r["gpus"] for r in rows]
    speed = [r["images_per_s"] for r in rows]
    fig, ax = plotting.axes()
    if rows and rows[0]["gpus"] == 1:
        ax.plot(gpus, [speed[0] * g for g in gpus], "--", color="grey", label="ideal (linear)")
    ax.plot(gpus, speed, "o-", label="measured")
    for r in rows:
        if r["efficiency_vs_1gpu"] is not None:
            ax.annotate(f"{r['efficiency_vs_1gpu']:.0%}", (r["gpus"], r["images_per_s"]),
                        textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(gpus, [str(g) for g in gpus])
    plotting.save(fig, ax, path, title, "GPUs (ranks)", "images/s")


def load_state(out: Path) -> dict:
    """``{point name: {"job": id, ...}}`` of an earlier run in ``out``; {} for a new study.
    A record this command did not write is a UserError naming ``--out``."""
    path = out / STATE
    if not os.path.lexists(path):
        return {}
    try:
        data = json.loads(read_small(path, MAX_RECORD_BYTES))
        points = data["points"]
        if not isinstance(points, dict):
            raise TypeError("points")
        for name, entry in points.items():
            job = entry["job"]
            if job is not None and not (isinstance(job, str) and _JOB.fullmatch(job)):
                raise TypeError(name)
        return {name: dict(entry) for name, entry in points.items()}
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__
        raise UserError(f"--out: {path} is not a scaling study's record ({why}); allowed: a "
                        "folder of one study, or a new one") from None


def save_state(out: Path, state: dict, study: dict) -> None:
    write_atomically(out / STATE, lambda f: json.dump({"study": study, "points": state}, f,
                                                      indent=1))


def read_result(path: Path) -> float | None:
    """The total images/s a train benchmark wrote, or None when it wrote nothing usable."""
    try:
        value = float(json.loads(read_small(path, MAX_RECORD_BYTES))["images_per_s"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def point_record(point: Point, job: str | None) -> dict:
    return {**asdict(point), "job": job}


def submit_chain(cluster, planned: dict[str, tuple], state: dict, out: Path,
                 study: dict) -> None:
    """Submit the points of ``planned`` (``{name: (Point, Plan)}``) without a result as a
    chain; a job still in Slurm stays its link. ``cluster``: a
    :class:`chainermn_rt.submission.Cluster`; ``state``: :func:`load_state`'s, updated and
    saved after each submission."""
    previous = None
    for name, (point, plan) in planned.items():
        entry = state.get(name)
        if read_result(out / f"{name}.json") is not None:
            continue
        if entry and entry.get("job") and cluster.state(entry["job"]) is None:
            previous = entry["job"]  # still pending or running: wait for it, keep the chain
            print(f"{name}: job {previous} still in Slurm", flush=True)
            continue
        previous = cluster.submit(plan, out / f"{name}.sh", after=previous)
        state[name] = point_record(point, previous)
        save_state(out, state, study)
        print(f"{name}: submitted job {previous} ({point.nodes} node(s) x {point.per_node})",
              flush=True)


def collect(cluster, planned: dict[str, tuple], state: dict, out: Path, title: str) -> int:
    """Wait for each point's job, then write the table (``scaling.md``, ``table.json``) and
    the plot; exit status 1 when a point has no result."""
    results, missing = [], []
    for name, (point, _) in planned.items():
        job = state.get(name, {}).get("job")
        if job and read_result(out / f"{name}.json") is None:
            final = cluster.wait(job)
            print(f"{name}: job {job} {final.state}, exit code {final.exit_code}", flush=True)
        found = read_result(out / f"{name}.json")
        if found is None:
            missing.append(name)
        else:
            results.append(Result(point, found))
    rows = table(results)
    text = markdown(rows)
    write_atomically(out / "scaling.md", lambda f: f.write(text))
    write_atomically(out / "table.json", lambda f: json.dump(rows, f, indent=1))
    if rows:
        plot(rows, out / "scaling.png", title)
    sys.stdout.write(text)
    if missing:
        print(f"no result for {', '.join(missing)}: see {out}/<point>-<job>.out; rerun to "
              "submit them again", file=sys.stderr)
        return 1
    print(f"wrote {out / 'scaling.md'}, {out / 'scaling.png'}")
    return 0
