"""Where ``Slurm.state`` reads a job's final state: scontrol until the job ends, then sacct's
record, else scontrol's, else the cluster's own records. Stub client commands on PATH (the
real ones: tests/test_jobs_sandbox.py, tests/test_resume_sandbox.py)."""

from __future__ import annotations

import pytest

from chainermn_rt.slurm_client import FinalState, NoAnswer, Slurm

SCONTROL = '#!/bin/sh\n[ -n "$STATE" ] && echo "JobId=7 JobState=$STATE ExitCode=0:0"\n'
SACCT = '#!/bin/sh\n[ -n "$ACCT" ] && echo "$ACCT"\nexit 0\n'


def _slurm(tmp_path, state: str, acct: str | None, **kw) -> Slurm:
    (tmp_path / "scontrol").write_text(SCONTROL)
    if acct is not None:
        (tmp_path / "sacct").write_text(SACCT)
    for stub in tmp_path.iterdir():
        stub.chmod(0o755)
    return Slurm(env={"PATH": f"{tmp_path}:/usr/bin:/bin", "STATE": state, "ACCT": acct or ""},
                 **kw)


@pytest.mark.parametrize("state, acct, expected", [
    ("RUNNING", "COMPLETED|0:0", None),                      # scontrol first: it still runs
    ("COMPLETED", "FAILED|3:0", FinalState("FAILED", 3)),    # sacct's record once it ended
    ("COMPLETED", "RUNNING|0:0", FinalState("COMPLETED", 0)),  # sacct behind: scontrol's
    ("COMPLETED", None, FinalState("COMPLETED", 0)),         # no sacct on PATH
    ("", "TIMEOUT|0:15", FinalState("TIMEOUT", 0)),          # scontrol forgot it
])
def test_final_state_prefers_sacct_once_the_job_ended(tmp_path, state, acct, expected):
    assert _slurm(tmp_path, state, acct).state("7") == expected


def test_without_accounting_the_clusters_own_records_answer(tmp_path):
    slurm = _slurm(tmp_path, "", "COMPLETED|0:0", accounting=False,
                   records=lambda job: FinalState("NODE_FAIL", 1))
    assert slurm.state("7") == FinalState("NODE_FAIL", 1)


# scontrol that gives no answer to its first call (slurmctld starved), then says COMPLETED
SLOW_ONCE = ('#!/bin/sh\nif [ ! -e "$SEEN" ]; then : > "$SEEN"; sleep 30; fi\n'
             'echo "JobId=7 JobState=COMPLETED ExitCode=0:0"\n')


def _slow_once(tmp_path, monkeypatch) -> Slurm:
    monkeypatch.setattr("chainermn_rt.slurm_client.JOB_ANSWER_S", 0.5)
    (tmp_path / "scontrol").write_text(SLOW_ONCE)
    (tmp_path / "scontrol").chmod(0o755)
    return Slurm(env={"PATH": f"{tmp_path}:/usr/bin:/bin", "SEEN": str(tmp_path / "seen")},
                 accounting=False)


def test_a_wait_asks_again_when_a_poll_gets_no_answer(tmp_path, monkeypatch):
    assert _slow_once(tmp_path, monkeypatch).wait("7", timeout=60, poll=0) == \
        FinalState("COMPLETED", 0)


def test_without_a_timeout_no_answer_ends_the_wait(tmp_path, monkeypatch):
    with pytest.raises(NoAnswer, match="scontrol show job -o 7: no answer in 0 s"):
        _slow_once(tmp_path, monkeypatch).wait("7", poll=0)
