"""`chainermn-rt scaling` on the Slurm sandbox: a chain of real jobs, a rerun that resumes."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import PYTHON

pytestmark = pytest.mark.slurm


def cli(*args, cwd):
    return subprocess.run([PYTHON, "-m", "chainermn_rt", "scaling", *args], check=False,
                          capture_output=True, text=True, timeout=900, cwd=cwd)


def jobs_of(out):
    return {name: p["job"] for name, p in json.loads((out / "scaling.json").read_text())[
        "points"].items()}


@pytest.mark.usefixtures("sandbox")
def test_study_on_the_sandbox_submits_once_resumes_and_resubmits_what_failed(tmp_path):
    out = tmp_path / "study"
    args = ["--site", "sandbox", "--max-nodes", "2", "--gpus-per-node", "2", "--model", "mlp",
            "--batchsize", "16", "--iterations", "3", "--warmup", "1", "--out", str(out)]
    first = cli(*args, "--no-wait", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    submitted = jobs_of(out)
    assert sorted(submitted) == ["1gpu", "1node", "2nodes"] and all(submitted.values())

    again = cli(*args, cwd=tmp_path)  # waits for the same jobs: submits nothing
    assert again.returncode == 0, again.stdout + again.stderr
    assert "submitted" not in again.stdout and jobs_of(out) == submitted
    rows = json.loads((out / "table.json").read_text())
    assert [(r["point"], r["nodes"], r["gpus"]) for r in rows] == [
        ("1gpu", 1, 1), ("1node", 1, 2), ("2nodes", 2, 4)]
    assert all(r["images_per_s"] > 0 for r in rows)
    assert rows[2]["efficiency_vs_1node"] == rows[2]["images_per_s"] / (2 * rows[1]["images_per_s"])
    assert (out / "scaling.png").read_bytes()[:4] == b"\x89PNG"
    assert "| 4 | 2 |" in again.stdout

    (out / "1node.json").unlink()  # as if that job had died without its result
    third = cli(*args, cwd=tmp_path)
    assert third.returncode == 0, third.stdout + third.stderr
    resubmitted = jobs_of(out)
    assert resubmitted["1node"] != submitted["1node"]
    assert {k: v for k, v in resubmitted.items() if k != "1node"} == \
        {k: v for k, v in submitted.items() if k != "1node"}
    assert third.stdout.count("submitted job") == 1
