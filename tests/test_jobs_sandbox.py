"""Generated job scripts, run for real on the local Slurm sandbox (bare metal).

MNIST from a generated script across 2 nodes is `make demo`'s test (tests/test_sandbox.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.rank_contract import parse_cpu_list
from chainermn_rt.render import render
from chainermn_rt.site import load_site

from conftest import PYTHON, REPO, json_objects

pytestmark = pytest.mark.slurm
SITE = REPO / "slurm" / "sites" / "sandbox.toml"
REPORT = str(REPO / "tests" / "programs" / "report_rank.py")


def _script(tmp_path, name="job.sh", **request) -> tuple:
    plan = make_plan(load_site(SITE), Request(**request))
    path = tmp_path / name
    path.write_text(render(plan))
    return plan, path


def _run(sandbox, tmp_path, path, timeout=300):
    job = sandbox.slurm.submit(path, cwd=tmp_path)
    state = sandbox.slurm.wait(job, timeout=timeout, poll=0.5)
    out = next(tmp_path.glob(f"*-{job}.out"), None)
    text = out.read_text(errors="replace") if out else ""
    assert tuple(state) == ("COMPLETED", 0), f"job {job}: {state}\n{text[-3000:]}"
    return job, text


def _reports(text):
    return sorted(json_objects(text),
                  key=lambda r: r["rank"])


@pytest.mark.parametrize("request_kw", [
    dict(nodes=2, gpus_per_node=2, command=("hostname",)),
    dict(nodes=2, gpus_per_node=4, command=("hostname",), per_rank_logs=True),
    dict(nodes=1, partition="cpu", launcher="mpirun", command=("hostname",)),
])
def test_sbatch_test_only_accepts_generated_scripts(sandbox, tmp_path, request_kw):
    _, path = _script(tmp_path, **request_kw)
    proc = sandbox.slurm.run(["sbatch", "--test-only", str(path)], cwd=tmp_path)
    assert proc.returncode == 0 and "to start at" in proc.stderr, proc.stderr


def test_sbatch_refuses_what_the_plan_would_too(sandbox, tmp_path):
    """The profile and the cluster agree: a job over the sandbox's limits is refused by both."""
    _, path = _script(tmp_path, nodes=2, gpus_per_node=2, command=("hostname",))
    text = path.read_text().replace("#SBATCH --gpus-per-node=2", "#SBATCH --gpus-per-node=5")
    path.write_text(text)
    proc = sandbox.slurm.run(["sbatch", "--test-only", str(path)], cwd=tmp_path)
    assert proc.returncode != 0 and "Requested node configuration is not available" in proc.stderr


def test_each_rank_gets_its_profile_slot(sandbox, tmp_path):
    """2 nodes x 2 GPUs: host, ranks, visible GPUs, device, CPUs and HCA as the profile says."""
    plan, path = _script(tmp_path, nodes=2, gpus_per_node=2, job_name="slots",
                         command=(PYTHON, REPORT))
    _, text = _run(sandbox, tmp_path, path)
    ranks = _reports(text)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert len({r["host"] for r in ranks}) == 2
    slots = load_site(SITE).partition("gpu").topology.slots
    for r in ranks:
        assert r["size"] == 4 and r["local_size"] == 2
        assert r["local_rank"] == r["rank"] % 2
        assert r["cuda_visible"] == "0,1"  # every GPU of the node stays visible (CUDA IPC)
        assert r["device"] == r["local_rank"]
        slot = slots[r["device"]]
        assert r["cpus"] == parse_cpu_list(slot.cpus)
        assert r["ucx"] == ",".join(slot.hcas)
        assert r["nccl_hca"] == "=sbx_ib0:1,sbx_ib1:1"  # the node's HCAs, on every rank
    # Slurm agrees with the script's `srun --cpu-bind=none` (TaskPlugin=task/cgroup): no
    # "srun: cluster configuration lacks support for cpu binding" at the log's head
    assert "lacks support for cpu binding" not in text, text[:500]


def test_mpirun_launcher_and_per_rank_logs(sandbox, tmp_path):
    plan, path = _script(tmp_path, nodes=2, partition="cpu", launcher="mpirun",
                         job_name="mpirun", per_rank_logs=True, command=(PYTHON, REPORT))
    job, _ = _run(sandbox, tmp_path, path)
    logs = sorted(tmp_path.glob(f"mpirun-{job}.rank*.out"))
    assert [p.name for p in logs] == [f"mpirun-{job}.rank{i}.out" for i in range(4)]
    ranks = _reports("".join(p.read_text() for p in logs))
    assert [(r["rank"], r["local_rank"], r["cpus"]) for r in ranks] == [
        (0, 0, [0]), (1, 1, [1]), (2, 0, [0]), (3, 1, [1])]
    assert len({r["host"] for r in ranks}) == 2


HOSTILE = ["a b", "'", '"', ";", "$(touch CANARY)", "`touch CANARY`", "x\ny", "é ✓ 漢字",
           "--", "\\", "$HOME", "*", ""]


def test_hostile_values_reach_the_program_byte_for_byte(sandbox, tmp_path):
    name = 'odd "name" #1; $(touch CANARY) `x` é'
    plan, path = _script(tmp_path, nodes=1, gpus_per_node=1, job_name=name,
                         env=(("HOSTILE", "$(touch CANARY) 'q' \"d\""),),
                         command=(PYTHON, "-c", "import json, os, sys; print(json.dumps("
                                  "{'argv': sys.argv[1:], 'env': os.environ['HOSTILE'], "
                                  "'name': os.environ['SLURM_JOB_NAME']}))", *HOSTILE))
    job = sandbox.slurm.submit(path, cwd=tmp_path)
    state = sandbox.slurm.wait(job, timeout=300, poll=0.5)
    out = next(tmp_path.glob(f"*-{job}.out"))
    assert tuple(state) == ("COMPLETED", 0), out.read_text()
    seen = json.loads(next(line for line in out.read_text().splitlines()
                           if line.startswith("{")))
    assert seen == {"argv": HOSTILE, "env": "$(touch CANARY) 'q' \"d\"", "name": name}
    assert not list(tmp_path.rglob("CANARY")) and not (REPO / "CANARY").exists()


def test_submit_command_waits_for_the_final_state(sandbox, tmp_path):
    ok = _cli_submit(sandbox, tmp_path, "true")
    assert ok.returncode == 0 and "COMPLETED, exit code 0" in ok.stdout, ok.stderr
    bad = _cli_submit(sandbox, tmp_path, "false")
    assert bad.returncode == 1 and "FAILED, exit code 1" in bad.stdout, bad.stderr


def _cli_submit(sandbox, tmp_path, *program, wait=("--wait",)):
    return subprocess.run(
        [sys.executable, "-m", "chainermn_rt", "submit", "--site", str(SITE),
         "--nodes", "1", "--gpus-per-node", "1", "--time", "2", *wait, "--", *program],
        env=sandbox.env(), capture_output=True, text=True, cwd=tmp_path, timeout=300)


def test_a_wait_that_runs_out_is_one_line_and_the_job_goes_on(sandbox, tmp_path):
    proc = _cli_submit(sandbox, tmp_path, "sleep", "60", wait=("--wait", "--wait-timeout", "1"))
    job = proc.stdout.split()[-1]
    try:
        assert proc.returncode == 1, proc
        assert proc.stderr.splitlines() == [
            f"chainermn-rt submit: error: job {job} did not end within 1 s; it goes on "
            f"(scancel {job} stops it)"]
        assert sandbox.slurm.state(job) is None  # still pending or running
    finally:
        sandbox.slurm.run(["scancel", job])


def test_site_check_live_matches_the_sandbox_and_reports_differences(sandbox, tmp_path):
    def check(path):
        return subprocess.run([sys.executable, "-m", "chainermn_rt", "site", "check", str(path),
                               "--live"],
                              env=sandbox.env(), capture_output=True, text=True, timeout=120)

    same = check(SITE)
    assert same.returncode == 0 and "matches the cluster" in same.stdout, same.stdout + same.stderr
    changed = tmp_path / "sandbox.toml"
    changed.write_text(SITE.read_text().replace('max_time = "00:30:00"', 'max_time = "01:00:00"',
                                                1))
    diff = check(changed)
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "partition gpu: max_time 01:00:00 in the profile, 00:30:00 in Slurm" in diff.stdout
