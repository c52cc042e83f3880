"""The step timeline on real Slurm jobs of the sandbox, 2 nodes x 2 ranks, rendered with
``--timeline``: MNIST with one rank slowed for real (named with its node), and the ImageNet
example on made-up JPEGs staged to the nodes; each job's records merge into a Chrome trace (a
process per node, a thread per rank) and a report page, found by the job's id."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from cpu_quota import cpu_quota
from timeline_fakes import check_trace

from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.rank_contract import TIMELINE_FOLDER
from chainermn_rt.render import render
from chainermn_rt.site import load_site
from chainermn_rt.submission import Cluster

from conftest import PYTHON, REPO

pytestmark = pytest.mark.slurm
SITE = REPO / "slurm" / "sites" / "sandbox.toml"
STARTED = " ranks, communicator "  # both examples' first line once MPI has started


def run_job(sandbox, folder: Path, name: str, command: list[str], stage=(),
            per_node: int = 2) -> tuple[str, str]:
    plan = make_plan(load_site(SITE), Request(
        nodes=2, gpus_per_node=per_node, time="10", job_name=name, timeline=True,
        stage=tuple(stage),
        env=(("OMP_NUM_THREADS", "1"),), command=tuple(command)))
    script = folder / f"{name}.sh"
    script.write_text(render(plan))
    done = Cluster(sandbox.site, sandbox.client()).run(script, cwd=folder, started=STARTED,
                                                       timeout=900)
    assert done.state == ("COMPLETED", 0), done.text
    return done.job, done.text


def merged(folder: Path, job: str, per_node: int = 2) -> dict:
    """`chainermn-rt timeline JOB` and `report JOB` from the job's working folder."""
    for command in ("timeline", "report"):
        proc = subprocess.run([PYTHON, "-m", "chainermn_rt", command, job], cwd=folder,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    records = folder / TIMELINE_FOLDER / job
    html = (records / "report.html").read_text()
    assert html.count('<figure class="plot"') == 5
    trace = json.loads((records / "trace.json").read_text())
    timed = check_trace(trace)
    nodes = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "process_name"}
    assert sorted(nodes.values()) == ["node1", "node2"]
    placed = {(nodes[e["pid"]], e["tid"]) for e in timed}
    assert placed == {(f"node{1 + rank // per_node}", rank) for rank in range(2 * per_node)}
    return trace


def test_mnist_with_a_slowed_rank_names_its_node(sandbox, tmp_path):
    """node2 is slow: its ranks, 2 and 3, run a quarter of the time (a cgroup's CPU quota).
    (Its ranks share the machine's two CPUs with node1's, one of each node per CPU.) Batches
    of 1000: the compute outweighs the exchange, so the others wait for node2's compute
    (the rule's evidence) more than for its slowness inside the exchange (which it leaves
    out)."""
    with cpu_quota(0.25) as cgroup:
        job, text = run_job(sandbox, tmp_path, "mnist-timeline", [
            PYTHON, str(REPO / "tests" / "programs" / "timeline_mnist.py"), "--iterations",
            "60", "--unit", "100", "--batchsize", "1000", "--n-train", "4000", "--n-test",
            "400", "--no-progress", "--log-every", "20", "--slow-rank", "2", "3",
            "--slow-cgroup", str(cgroup), "--out", str(tmp_path / "result")])
    # the host is named, with the advice: one of its ranks or both (which one waits on the
    # other is the scheduler's), never one of node1's
    line = next(ln for ln in text.splitlines() if ln.startswith("chainermn-rt: slow node: "))
    assert re.match(r"chainermn-rt: slow node: rank [23] on node2: compute ", line), line
    named = line.partition("; not named: ")[0]
    assert "--exclude-from" in named and "node1" not in named, line
    slow = tmp_path / TIMELINE_FOLDER / job / "slow-nodes.txt"
    assert slow.read_text() == "node2\n"
    trace = merged(tmp_path, job)
    steps = [e for e in trace["traceEvents"] if e["name"] == "step"]
    assert len(steps) == 4 * 60
    # the next job, given that file, keeps off node2: two nodes are more than are left, one
    # runs on node1
    def submit(nodes: str) -> subprocess.CompletedProcess:
        return subprocess.run([PYTHON, "-m", "chainermn_rt", "submit", "--site", "sandbox",
                               "--nodes", nodes, "--gpus-per-node", "1", "--time", "5",
                               "--exclude-from", str(slow), "--log", "after-%j.out", "--wait",
                               "--", "/bin/hostname"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)

    refused = submit("2")
    assert refused.returncode != 0 and "node configuration is not available" in \
        refused.stderr, refused.stdout + refused.stderr
    ran = submit("1")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert [log.read_text().split() for log in tmp_path.glob("after-*.out")] == [["node1"]]


def test_imagenet_on_made_up_jpegs_merges_and_reports(sandbox, tmp_path):
    for argv in (["data", "synth", str(tmp_path / "jpegs/train"), "--classes", "4",
                  "--per-class", "24"],
                 ["data", "synth", str(tmp_path / "jpegs/val"), "--classes", "4",
                  "--per-class", "6", "--first", "1000"],
                 ["data", "pack", str(tmp_path / "jpegs/train"), str(tmp_path / "shards/train"),
                  "--shard-size", "8"],
                 ["data", "pack", str(tmp_path / "jpegs/val"), str(tmp_path / "shards/val"),
                  "--shard-size", "8"]):
        subprocess.run([PYTHON, "-m", "chainermn_rt", *argv], check=True, capture_output=True,
                       timeout=300)
    shards = tmp_path / "shards"
    job, text = run_job(sandbox, tmp_path, "imagenet-timeline", [
        PYTHON, str(REPO / "examples" / "train_imagenet.py"), "--n-class", "4", "--train",
        str(shards / "train"), "--val", str(shards / "val"), "--insize", "64", "--val-resize",
        "73", "--batchsize", "8", "--iterations", "6", "--log-every", "6", "--no-progress",
        "--workers", "1", "--out", str(tmp_path / "result")], stage=[str(shards)])
    assert "chainermn-rt: slow node: too few steps to judge" in text, text
    trace = merged(tmp_path, job)
    names = {e["name"] for e in trace["traceEvents"]}
    assert {"data", "compute", "exchange", "update", "ext:validation"} <= names
    steps = [e for e in trace["traceEvents"] if e["name"] == "step"]
    assert len(steps) == 4 * 6 and {e["args"]["samples"] for e in steps} == {8}
