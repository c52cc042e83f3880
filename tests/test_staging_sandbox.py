"""Data staged to node-local storage (``--stage``) on the Slurm sandbox, 2 nodes x 1 rank.

Each node of the sandbox has its own scratch folder at the profile's local_scratch; a job
copies a shard folder there, each rank checks the copy it finds with
chainermn_rt.staging.local_path (tests/programs/stage_check.py), and the copy is gone from
every node when the job has ended: completed, failed, or requeued by its stop signal (the
requeued run stages again).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from chainermn_rt.data.manifest import Manifest, Shard, shard_name, to_json
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.render import render
from chainermn_rt.sandbox import scratch
from chainermn_rt.site import load_site
from chainermn_rt.staging import FOLDER_PREFIX

from conftest import PYTHON, REPO

pytestmark = pytest.mark.slurm
SITE = REPO / "slurm" / "sites" / "sandbox.toml"
CHECK = str(REPO / "tests" / "programs" / "stage_check.py")


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """A folder of 3 shards and its manifest, plus a file the manifest does not list."""
    folder = tmp_path_factory.mktemp("shards")
    entries = []
    for i in range(3):
        data = bytes([i]) * (512 * (i + 1))
        (folder / shard_name(i)).write_bytes(data)
        entries.append(Shard(shard_name(i), 1, len(data), hashlib.sha256(data).hexdigest()))
    (folder / "manifest.json").write_text(to_json(Manifest(("a",), None, tuple(entries))))
    (folder / "notes.txt").write_text("not staged")
    return folder


def _submit(sandbox, folder: Path, shards: Path, *args: str) -> str:
    out = folder / "out"
    out.mkdir(parents=True)
    plan = make_plan(load_site(SITE), Request(
        nodes=2, gpus_per_node=1, time="5", job_name="stage", stage=(str(shards),),
        command=(PYTHON, CHECK, str(shards), str(out), *args)))
    (folder / "job.sh").write_text(render(plan))
    return sandbox.slurm.submit(folder / "job.sh", [], cwd=folder)


def _reports(folder: Path, run: str = "0") -> list[dict]:
    paths = sorted((folder / "out").glob(f"rank*.run{run}.json"))
    return [json.loads(p.read_text()) for p in paths]


def _check_copies(sandbox, reports: list[dict], shards: Path, job: str) -> None:
    """Every rank read a complete copy of the manifest's files in its own node's scratch."""
    assert sorted(r["host"] for r in reports) == ["node1", "node2"], reports
    local_scratch = load_site(SITE).partition(None).local_scratch
    for r in reports:
        assert r["local"] == f"{local_scratch}/{FOLDER_PREFIX}{job}/0", r
        assert r["files"] == ["manifest.json", *(shard_name(i) for i in range(3))], r
        assert r["shards_ok"], r
    # node-local: two folders, neither of them the shared one (same file system here)
    places = {(r["device"], r["inode"]) for r in reports}
    source = os.stat(shards)
    assert len(places) == 2 and (source.st_dev, source.st_ino) not in places, reports


def _assert_removed(sandbox, job: str) -> None:
    for node in sandbox.settings.node_names():
        left = scratch.node_folder(sandbox.settings, node) / f"{FOLDER_PREFIX}{job}"
        assert not left.exists(), f"{left} was not removed"


def _log(folder: Path, job: str) -> str:
    return (folder / f"stage-{job}.out").read_text(errors="replace")


def test_a_job_reads_its_node_local_copy_and_it_is_removed(sandbox, tmp_path, shards):
    job = _submit(sandbox, tmp_path, shards)
    state = sandbox.slurm.wait(job, timeout=300, poll=0.5)
    log = _log(tmp_path, job)
    assert state == ("COMPLETED", 0), log
    _check_copies(sandbox, _reports(tmp_path), shards, job)
    assert log.count("4 files, 0.0 MB") == 2, log  # one copy step line per node
    _assert_removed(sandbox, job)


def test_a_failing_job_removes_its_copies_too(sandbox, tmp_path, shards):
    job = _submit(sandbox, tmp_path, shards, "--fail")
    state = sandbox.slurm.wait(job, timeout=300, poll=0.5)
    assert state.state == "FAILED", _log(tmp_path, job)
    _check_copies(sandbox, _reports(tmp_path), shards, job)
    _assert_removed(sandbox, job)


def test_a_job_requeued_by_its_stop_signal_removes_and_stages_again(sandbox, tmp_path, shards):
    job = _submit(sandbox, tmp_path, shards, "--wait-for-stop")
    deadline = time.monotonic() + 300
    while len(_reports(tmp_path)) < 2:  # both ranks hold their copy, waiting for the stop
        assert sandbox.slurm.state(job) is None, _log(tmp_path, job)
        assert time.monotonic() < deadline, "the ranks did not report"
        time.sleep(0.3)
    assert sandbox.slurm.run(["scancel", "--signal=USR2", "--batch", job]).returncode == 0
    state = sandbox.slurm.wait(job, timeout=300, poll=0.5)
    log = _log(tmp_path, job)
    assert state == ("COMPLETED", 0), log
    assert f"requeueing job {job} (restart 1 of at most 3)" in log, log
    assert sandbox.slurm.show(job).get("Restarts") == "1", log
    _check_copies(sandbox, _reports(tmp_path, "1"), shards, job)
    # the requeued run copied again: the first run's copies were removed before the requeue
    assert log.count("4 files, 0.0 MB") == 4 and "left alone" not in log, log
    _assert_removed(sandbox, job)
