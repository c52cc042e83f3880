"""Stalls, a rank that never starts and a lost node end their job on the Slurm sandbox
(2 nodes x 2 ranks under srun), each with one line naming the rank and host at fault.
Seconds are printed (``pytest -s``), not checked."""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path

import pytest

from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.rank_contract import STALL_TIMEOUT_VAR, START_TIMEOUT_VAR
from chainermn_rt.render import render
from chainermn_rt.site import load_site

from conftest import PYTHON, REPO

pytestmark = pytest.mark.slurm
SITE = REPO / "slurm" / "sites" / "sandbox.toml"
STALL = str(REPO / "tests" / "programs" / "stall_rank.py")
MNIST = [PYTHON, str(REPO / "examples" / "train_mnist.py"), "--n-train", "4000", "--unit", "100",
         "--batchsize", "50", "--iterations", "1000000", "--log-every", "100", "--no-progress"]


def _submit(sandbox, folder: Path, command, launcher="srun", **env) -> str:
    where = dict(gpus_per_node=2) if launcher == "srun" else dict(partition="cpu",
                                                                   launcher="mpirun")
    plan = make_plan(load_site(SITE), Request(nodes=2, time="10", job_name="watchdog",
                                              command=tuple(command), env=tuple(env.items()),
                                              **where))
    assert plan.world_size == 4
    (folder / "job.sh").write_text(render(plan))
    # --no-requeue: were Slurm to notice a lost node first, the job would end, not wait
    return sandbox.slurm.submit(folder / "job.sh", ["--no-requeue"], cwd=folder)


def _finish(sandbox, folder: Path, job: str, fault: datetime) -> tuple[str, str]:
    try:
        state = sandbox.slurm.wait(job, timeout=600, poll=0.5)  # a stuck sandbox, not a speed
    finally:
        sandbox.slurm.run(["scancel", job])
    end = datetime.fromisoformat((sandbox.job_record(job) or {}).get("EndTime", "1970-01-01"))
    print(f"\nMEASURED job {job}: {state.state}; its batch script ended "
          f"{(end - fault).total_seconds():.0f} s after the fault (Slurm's record), Slurm "
          f"called it final {(datetime.now() - fault).total_seconds():.0f} s after")
    return state.state, (folder / f"watchdog-{job}.out").read_text(errors="replace")


def _log(folder: Path, job: str) -> str:
    path = folder / f"watchdog-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_stalled_rank_is_named_and_the_job_ends(sandbox, tmp_path):
    """An unmodified ChainerMN script (chainermn.create_communicator, no setup())."""
    job = _submit(sandbox, tmp_path, [PYTHON, STALL, "--how", "loop", "--plain"],
                  **{STALL_TIMEOUT_VAR: "5"})
    while "stalls before iteration 4" not in _log(tmp_path, job):
        assert sandbox.slurm.state(job) is None, _log(tmp_path, job)
        time.sleep(0.2)
    state, log = _finish(sandbox, tmp_path, job, datetime.now())
    assert state == "FAILED", log[-3000:]
    host = re.search(r"rank 1 on (\S+) stalls", log).group(1)
    assert re.search(rf"chainermn-rt: stall: ranks 0,2-3 wait in multi_node_mean_grad \(iteration "
                     rf"4\) for \d+ s; not arrived: rank 1 on {host} \(after iteration 3, "
                     rf"outside collectives for \d+ s\); aborting the job", log), log[-3000:]


def test_a_rank_that_never_starts_mpi_is_named_and_the_job_ends(sandbox, tmp_path):
    job = _submit(sandbox, tmp_path, [PYTHON, STALL, "--how", "startup", "--seconds", "300"],
                  **{START_TIMEOUT_VAR: "8"})
    state, log = _finish(sandbox, tmp_path, job, datetime.now())
    assert state == "FAILED", log[-3000:]
    assert re.search(r"chainermn-rt: rank 1 on node1 has not begun MPI start-up 4 s after it "
                     r"started; the others wait for it", log), log[-3000:]
    assert re.search(r"chainermn-rt: rank [023] on node\d: MPI start-up not complete 8 s after "
                     r"it began; ending the job", log), log[-3000:]


@pytest.mark.parametrize("launcher, command, started", [
    ("srun", [*MNIST], "iteration"),
    ("mpirun", [PYTHON, STALL, "--how", "none", "--seconds", "600", "--plain"], "training")],
    ids=["srun-setup", "mpirun-unmodified-chainermn"])
def test_a_lost_node_is_named_and_the_job_ends(sandbox, tmp_path, launcher, command, started):
    """node2's slurmd, step and ranks are SIGKILLed mid-training (default settings): the
    MNIST example under srun, an unmodified ChainerMN script under mpirun."""
    job = _submit(sandbox, tmp_path, [*command, *(["--out", str(tmp_path / "out")]
                                                  if launcher == "srun" else [])],
                  launcher=launcher)
    while started not in _log(tmp_path, job):  # training runs
        assert sandbox.slurm.state(job) is None, _log(tmp_path, job)
        time.sleep(0.5)
    time.sleep(2)
    try:
        fault = datetime.now()
        assert sandbox.fail_node("node2") >= 3  # slurmd, slurmstepd, ranks (orted)
        state, log = _finish(sandbox, tmp_path, job, fault)
    finally:
        sandbox.revive_node("node2")
    assert state == "FAILED", log[-3000:]
    line = next((x for x in log.splitlines() if x.startswith("chainermn-rt: stall:")), "")
    named = re.match(r"chainermn-rt: stall: ranks 0-1 wait in \w+ \(iteration \d+\) for \d+ s; "
                     r"not arrived: rank 2 on node2 \(silent for \d+ s: dead, wedged or its node "
                     r"lost; .*\); rank 3 on node2 \(silent for \d+ s: dead, wedged or its node "
                     r"lost; .*\); aborting the job\Z", line)
    # mpirun sees its daemon on node2 go first and ends the job itself, naming the node
    assert named or (launcher == "mpirun" and re.search(
        r"ORTE has lost communication with a remote daemon\.\s+HNP daemon.*\n\s*Remote daemon: "
        r"\S+ on node node2", log)), log[-3000:]
