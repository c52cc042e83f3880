"""A failing rank ends its whole generated job on the Slurm sandbox, with srun and with mpirun,
for scripts that call ``chainermn_rt.setup()`` and for plain mpi4py/ChainerMN ones.

Each job: 2 nodes x 2 ranks, ``--time 3``; rank 1 fails after a first allreduce while the
others wait in a second one (tests/programs/fail_rank.py). Pass criteria are final states and
output; the seconds each job took are printed (``pytest -s``), not checked.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

import pytest

from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.render import render
from chainermn_rt.site import load_site

from conftest import PYTHON, REPO

pytestmark = pytest.mark.slurm
SITE = REPO / "slurm" / "sites" / "sandbox.toml"
FAIL = str(REPO / "tests" / "programs" / "fail_rank.py")
LAUNCHERS = {"srun": dict(gpus_per_node=2), "mpirun": dict(partition="cpu", launcher="mpirun")}


def _job(sandbox, tmp_path, launcher, *args) -> tuple:
    """Render, submit and wait; (final state, job output, seconds from submission to the end)."""
    plan = make_plan(load_site(SITE), Request(nodes=2, time="3", job_name=f"fail-{launcher}",
                                              command=(PYTHON, FAIL, *args),
                                              **LAUNCHERS[launcher]))
    assert plan.world_size == 4
    path = tmp_path / "job.sh"
    path.write_text(render(plan))
    started = time.monotonic()
    job = sandbox.slurm.submit(path, cwd=tmp_path)
    try:
        state = sandbox.slurm.wait(job, timeout=900, poll=0.5)  # a stuck sandbox, not a speed
    finally:
        sandbox.slurm.run(["scancel", job])  # a no-op once it ended
    wall = time.monotonic() - started
    out = next(tmp_path.glob(f"*-{job}.out"), None)
    text = out.read_text(errors="replace") if out else ""
    record = sandbox.job_record(job) or {}
    times = {k: datetime.fromisoformat(record[k]) for k in ("SubmitTime", "StartTime", "EndTime")
             if k in record}
    spans = {"submit->end": times["EndTime"] - times["SubmitTime"],
             "start->end": times["EndTime"] - times["StartTime"]} if len(times) == 3 else {}
    print(f"\nMEASURED {launcher} {' '.join(args)}: job {job} {state.state} "
          f"exit {state.exit_code}; " + ", ".join(f"{k} {v.total_seconds():.0f} s"
                                                  for k, v in spans.items())
          + f" (Slurm's record); submit->seen ended {wall:.1f} s")
    return state, text


def _host_of_rank(text: str, rank: int) -> str:
    found = re.search(rf"rank {rank} on ([^\s:]+): first allreduce 4", text)  # lines may interleave
    assert found, text[-3000:]
    return found.group(1)


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("setup", [True, False], ids=["setup", "plain"])
def test_an_uncaught_exception_ends_the_whole_job(sandbox, tmp_path, launcher, setup):
    state, text = _job(sandbox, tmp_path, launcher, *(["--setup"] if setup else []))
    assert state.state == "FAILED", f"{state}\n{text[-3000:]}"  # a hang would be TIMEOUT
    host = _host_of_rank(text, 1)
    assert (f"chainermn-rt: rank 1 on {host} failed: RuntimeError: rank 1 fails on purpose; "
            "aborting the job") in text, text[-3000:]
    assert "second allreduce returned" not in text


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_killed_rank_ends_the_job(sandbox, tmp_path, launcher):
    state, text = _job(sandbox, tmp_path, launcher, "--how", "kill")
    assert state.state not in ("COMPLETED", "TIMEOUT"), f"{state}\n{text[-3000:]}"
    assert "second allreduce returned" not in text


@pytest.mark.parametrize("how, line", [
    ("exit", "chainermn-rt: rank 1 on {host} exited with status 3; aborting the job"),
    ("thread", "chainermn-rt: rank 1 on {host} failed in thread 'loader': RuntimeError: rank 1's "
               "loader fails on purpose; aborting the job")])
def test_sys_exit_and_a_failing_thread_end_the_job(sandbox, tmp_path, how, line):
    state, text = _job(sandbox, tmp_path, "srun", "--how", how)
    assert state.state == "FAILED", f"{state}\n{text[-3000:]}"  # a hang would be TIMEOUT
    assert line.format(host=_host_of_rank(text, 1)) in text, text[-3000:]
    assert "second allreduce returned" not in text
