"""The timeline on real MPI jobs (mpirun -np 2, examples/train_mnist.py through
tests/programs/timeline_mnist.py): a rank slowed for real is named with its host, a balanced
job names none, an injected clock offset is corrected in the merged trace, a crashed job merges
up to the crash, a second run appends a marked part, and rank 0 writes the site's metrics."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest
from cpu_quota import cpu_quota
from prometheus_client.parser import text_string_to_metric_families
from timeline_fakes import check_trace

from chainermn_rt.rank_contract import METRICS_DIR_VAR, TIMELINE_VAR
from chainermn_rt.timeline import merge, records

from conftest import PYTHON, REPO, clean_launcher_env, mpirun_argv, run_mpi

pytestmark = pytest.mark.mpi
PROGRAM = str(REPO / "tests" / "programs" / "timeline_mnist.py")
MNIST = ["--unit", "100", "--n-train", "4000", "--n-test", "400", "--no-progress",
         "--log-every", "20"]
HOST = socket.gethostname()


def train(tmp_path, name: str, *args: str, check: bool = True, extra_env=None):
    folder = tmp_path / name
    env = {**os.environ, TIMELINE_VAR: str(folder), "OMP_NUM_THREADS": "1", **(extra_env or {})}
    proc = run_mpi(2, [PROGRAM, *MNIST, "--out", str(tmp_path / f"{name}-result"), *args],
                   env=env, check=check)
    return folder, proc.stdout + proc.stderr


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "chainermn_rt", *args], capture_output=True,
                          text=True, timeout=120)


def test_a_slowed_rank_is_named_and_a_skewed_clock_corrected(tmp_path):
    """Rank 1 runs a quarter of the time (a cgroup's CPU quota); its clock reads 5 s ahead."""
    copies = tmp_path / "metrics-copies"
    copies.mkdir()
    metrics_dir = tmp_path / "textfile"
    metrics_dir.mkdir()
    with cpu_quota(0.25) as cgroup:
        folder, out = train(tmp_path, "slow", "--iterations", "60", "--slow-rank", "1",
                            "--slow-cgroup", str(cgroup), "--skew-rank", "1", "--skew-seconds",
                            "5", "--metrics-every", "0.05", "--metrics-copy", str(copies),
                            extra_env={METRICS_DIR_VAR: str(metrics_dir)})
    assert f"chainermn-rt: slow node: rank 1 on {HOST}: compute " in out, out
    assert (folder / "slow-nodes.txt").read_text() == f"{HOST}\n"
    run = merge.load(folder)
    rank1 = run.parts[1][0]
    # -5 s, give or take what the two clocks' readings at each rank's start differ by
    assert round(rank1.info.offset_us / 1e6) == -5 == round(rank1.end_offset_us / 1e6)

    proc = cli("timeline", str(folder), "--output", str(tmp_path / "trace.json"))
    assert proc.returncode == 0, proc.stderr
    assert f"slow node: rank 1 on {HOST}" in proc.stdout
    trace = json.loads((tmp_path / "trace.json").read_text())
    timed = check_trace(trace)
    # causality: no rank leaves an allreduce before every rank has entered it; with rank 1's
    # 5 s uncorrected this fails by 5 s
    slack = run.clock_bound_us() + 2
    exchanges: dict[int, list[dict]] = {}
    for e in timed:
        if e["name"] == "exchange":
            exchanges.setdefault(e["args"]["iteration"], []).append(e)
    assert len(exchanges) == 60
    for events in exchanges.values():
        assert len(events) == 2
        assert min(e["ts"] + e["dur"] for e in events) >= max(e["ts"] for e in events) - slack

    kept = sorted(copies.glob("*.prom"))
    assert kept and os.listdir(metrics_dir) == []  # written while running, removed at the end
    families = {f.name: f for f in text_string_to_metric_families(kept[-1].read_text())}
    assert families["chainermn_rt_images_per_second"].samples[0].value > 0
    assert families["chainermn_rt_ranks"].samples[0].value == 2
    assert {s.labels["phase"] for s in families["chainermn_rt_phase_share"].samples} == \
        {"data", "compute", "exchange", "update", "extensions"}


def test_a_balanced_job_names_none_and_a_second_run_appends_a_part(tmp_path):
    # both ranks on one CPU: a load elsewhere on the machine (CI builds images meanwhile) falls
    # on both alike
    folder, out = train(tmp_path, "even", "--iterations", "40", "--snapshot-every", "40",
                        "--one-cpu", "0")
    assert "chainermn-rt: slow node: none (" in out, out
    assert (folder / "slow-nodes.txt").read_text() == ""
    # the job requeued: the same folder, resumed from the snapshot, its restart count 1
    env = clean_launcher_env({**os.environ, TIMELINE_VAR: str(folder), "OMP_NUM_THREADS": "1"})
    proc = subprocess.run(
        [*mpirun_argv(2), "-x", "SLURM_RESTART_COUNT=1", PYTHON, PROGRAM, *MNIST, "--out",
         str(tmp_path / "even-result"), "--iterations", "70"],
        capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = merge.load(folder)
    for rank in (0, 1):
        parts = run.parts[rank]
        assert [(p.info.part, p.info.restart, p.ended) for p in parts] == \
            [(1, 0, True), (2, 1, True)]
        assert [s.iteration for s in parts[1].steps] == list(range(41, 71))
    proc = cli("timeline", str(folder))
    assert proc.returncode == 0, proc.stderr
    trace = json.loads((folder / "trace.json").read_text())
    check_trace(trace)
    assert "part 2 (requeued: restart 1)" in {e["name"] for e in trace["traceEvents"]}


def test_a_crashed_job_merges_up_to_the_crash(tmp_path):
    folder, out = train(tmp_path, "crash", "--iterations", "60", "--fail-at", "25",
                        check=False)
    assert "injected failure" in out
    run = merge.load(folder)
    assert run.damaged == [] and not any(p.ended for ps in run.parts.values() for p in ps)
    # rank 1 kept its steps as training failed (the trainer's finalize); rank 0, killed by the
    # abort, what it had written by then (every 2 s: here maybe none)
    steps = [len(run.parts[r][0].steps) for r in (0, 1)]
    assert 0 < steps[1] < 25 and steps[0] < 25
    proc = cli("timeline", str(folder))
    assert proc.returncode == 0, proc.stderr
    check_trace(json.loads((folder / "trace.json").read_text()))
    assert records.rank_of("rank-00001.jsonl") == 1
