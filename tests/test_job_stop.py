"""The batch shell's stop handling, as the Plan decides it, run without Slurm.

A rendered job script runs under bash with stubs for ``srun`` (ranks that write a snapshot
when the stop file appears, or not) and ``scontrol`` (records what it is asked); the test sends
the site's signal as Slurm would. tests/test_resume_sandbox.py runs the same with real Slurm.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan, stop_of
from chainermn_rt.rank_contract import STOP_DONE_SUFFIX, STOP_READY_SUFFIX
from chainermn_rt.site import load_site, resolve_site
from chainermn_rt.stop_verdict import decide
from chainermn_rt.submission import write_script

SRUN = """#!/bin/sh
# The ranks: started (saying they resume, with STUB_RESUMABLE=1); on the stop file, a snapshot
# (STUB_SNAPSHOT=1) or none, then exit STUB_STOP_EXIT; or fail at once.
[ "${STUB_RESUMABLE:-0}" = 1 ] && touch "$CHAINERMN_RT_STOP_FILE.resumable"
touch "$STUB_DIR/started"
[ -n "${STUB_EXIT:-}" ] && exit "$STUB_EXIT"
while [ ! -e "$CHAINERMN_RT_STOP_FILE" ]; do sleep 0.05; done
[ "${STUB_SNAPSHOT:-1}" = 1 ] && echo /out/snapshots/iter_000000120 > "$CHAINERMN_RT_STOP_FILE.done"
touch "$STUB_DIR/ended"
exit "${STUB_STOP_EXIT:-0}"
"""
# The ranks leave the files of STUB_KEY's first three facts (snapshot, asked, resumable), then
# exit 7. (`: >`, not touch: the touch stub waits on the stop file.)
SRUN_FACTS = f"""#!/bin/bash
f=$CHAINERMN_RT_STOP_FILE
if [ "${{STUB_KEY:0:1}}" = 1 ]; then printf '%s\\n' "$STUB_SNAPSHOT" > "$f{STOP_DONE_SUFFIX}"; fi
if [ "${{STUB_KEY:1:1}}" = 1 ]; then : > "$f"; fi
if [ "${{STUB_KEY:2:1}}" = 1 ]; then : > "$f{STOP_READY_SUFFIX}"; fi
touch "$STUB_DIR/started"
exit 7
"""
# scontrol: records what it is asked; a job's record says PreemptTime=STUB_PREEMPT_TIME
SCONTROL = """#!/bin/sh
echo "$@" >> "$STUB_DIR/scontrol.log"
if [ "$1 $2 $3" = "-o show job" ]; then
  echo "JobId=$4 JobName=x PreemptTime=${STUB_PREEMPT_TIME:-None} Restarts=0"
fi
"""
# The trap's touch returns only after the step has ended: the race CI once met (the step
# ending while the trap still runs) happens every time.
TOUCH = """#!/bin/sh
/usr/bin/touch "$@"
if [ "$1" = "$CHAINERMN_RT_STOP_FILE" ]; then
  while [ ! -e "$STUB_DIR/ended" ]; do sleep 0.05; done
  sleep 0.3
fi
"""


def _run(tmp_path: Path, env: dict[str, str], signal_it: bool = True, srun: str = SRUN,
         profile: str = "sandbox", **site_changes) -> tuple[subprocess.CompletedProcess,
                                                           list[str]]:
    """Run the sandbox profile's script (signal USR2@60, requeue, 3 restarts; Slurm 22.05, or
    ``profile`` sandbox-debian13's 24.11) as a batch shell; the exit status and stderr, and
    what scontrol was asked."""
    site = replace(load_site(resolve_site(profile)), **site_changes)
    script = write_script(make_plan(site, Request(nodes=1, command=("true",))),
                          tmp_path / "job.sh")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, text in (("srun", srun), ("scontrol", SCONTROL), ("touch", TOUCH)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_DIR": str(tmp_path), "SLURM_JOB_ID": "77",
           **env}
    # files, not pipes: the trap's delayed kill (a sleep) would hold a pipe open for wait_s
    with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
        proc = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env, text=True,
                                stdout=out, stderr=err, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not (tmp_path / "started").exists():  # the trap is set before srun starts
                assert time.monotonic() < deadline and proc.poll() is None, err.read()
                time.sleep(0.05)
            if signal_it:
                proc.send_signal(signal.SIGUSR2)
            proc.wait(timeout=60)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the trap's delayed kill, if left
            except ProcessLookupError:
                pass
    log = tmp_path / "scontrol.log"
    asked = log.read_text().splitlines() if log.exists() else []
    return subprocess.CompletedProcess(proc.args, proc.returncode, (tmp_path / "out").read_text(),
                                       (tmp_path / "err").read_text()), asked


def test_a_snapshot_on_the_signal_requeues_the_job(tmp_path):
    proc, asked = _run(tmp_path, {})
    assert (proc.returncode, asked) == (0, ["requeue 77"]), proc.stderr
    assert ("snapshot /out/snapshots/iter_000000120 written; requeueing job 77 (restart 1 of "
            "at most 3)") in proc.stderr
    assert not list(tmp_path.glob(".chainermn-rt-stop-*"))  # the files are cleared


def test_an_array_task_requeues_only_itself(tmp_path):
    proc, asked = _run(tmp_path, {"SLURM_ARRAY_JOB_ID": "70", "SLURM_ARRAY_TASK_ID": "4"})
    assert (proc.returncode, asked) == (0, ["requeue 70_4"]), proc.stderr


def test_after_max_requeues_it_stops_with_its_snapshot(tmp_path):
    proc, asked = _run(tmp_path, {"SLURM_RESTART_COUNT": "3"})
    assert (proc.returncode, asked) == (0, []), proc.stderr
    assert "not requeueing (3 restart(s) allowed, 3 done)" in proc.stderr


def test_without_requeue_in_the_profile_it_stops_with_its_snapshot(tmp_path):
    proc, asked = _run(tmp_path, {}, requeue=False)
    assert (proc.returncode, asked) == (0, []), proc.stderr
    assert "not requeueing (the profile has requeue = false)" in proc.stderr
    assert "scontrol" not in (tmp_path / "job.sh").read_text()  # decided in the Plan


def test_ranks_that_write_no_snapshot_are_not_requeued(tmp_path):
    proc, asked = _run(tmp_path, {"STUB_SNAPSHOT": "0"})
    assert (proc.returncode, asked) == (0, []), proc.stderr
    assert "the ranks wrote no snapshot" in proc.stderr


@pytest.mark.parametrize("restarts, asked, status", [("0", ["requeue 77"], 0), ("3", [], 143)])
def test_a_resumable_program_without_a_snapshot_in_time_resumes_from_the_one_before(
        tmp_path, restarts, asked, status):
    """Its ranks said they resume (the .resumable file) but wrote no snapshot before the step
    ended (killed: 143): requeued all the same, while restarts are left; else its status."""
    proc, got = _run(tmp_path, {"STUB_RESUMABLE": "1", "STUB_SNAPSHOT": "0",
                                "STUB_STOP_EXIT": "143", "SLURM_RESTART_COUNT": restarts})
    assert (proc.returncode, got) == (status, asked), proc.stderr
    said = "no snapshot within 45 s; the next run resumes from the one before; "
    assert said + ("requeueing job 77 (restart 1 of at most 3)" if asked else
                   "not requeueing (3 restart(s) allowed, 3 done)") in proc.stderr
    assert not list(tmp_path.glob(".chainermn-rt-stop-*"))


CASES = [(profile, changes, "".join(bits))
         for profile, changes, facts in (("sandbox", {}, 4), ("sandbox", {"requeue": False}, 4),
                                         ("sandbox-debian13", {}, 5))
         for bits in itertools.product("10", repeat=facts)]


@pytest.mark.parametrize("profile, changes, key", CASES,
                         ids=[f"{p}-{'requeue' if not c else 'no-requeue'}-{k}"
                              for p, c, k in CASES])
def test_the_script_does_what_python_decided_for_every_case(tmp_path, profile, changes, key):
    """Each key (snapshot, asked, resumable, restarts left; on Slurm 24.11 also preempted) set
    up by the step's files, SLURM_RESTART_COUNT and the job's PreemptTime: the line, the
    requeue and the exit status are decide()'s."""
    stop = stop_of(replace(load_site(resolve_site(profile)), **changes))
    # a restart count below 0 gets "left" even where no restart is allowed: every key runs
    restarts = (0 if stop.max_requeues else -1) if key[3] == "1" else stop.max_requeues
    snapshot = "/out/it's $HOME `id`  a\\b"
    preempt_time = "2026-12-06T04:26:33" if key[4:] == "1" else "None"
    proc, asked = _run(tmp_path, {"STUB_KEY": key, "STUB_SNAPSHOT": snapshot,
                                  "SLURM_RESTART_COUNT": str(restarts),
                                  "STUB_PREEMPT_TIME": preempt_time},
                       signal_it=False, srun=SRUN_FACTS, profile=profile, **changes)
    verdict = decide(*(bit == "1" for bit in key), wait_s=stop.wait_s, requeue=stop.requeue,
                     max_requeues=stop.max_requeues)
    said = verdict.message and verdict.message.format(
        snapshot=snapshot, job="77", restarts=restarts, next=restarts + 1)
    # the job's record is read where it matters: the shell asked for a snapshot
    looked = ["-o show job 77"] if stop.slurm_requeues_preempted and key[1] == "1" else []
    assert (proc.stderr, asked, proc.returncode) == (
        f"chainermn-rt: {said}\n" if said else "",
        looked + (["requeue 77"] if verdict.requeue else []),
        7 if verdict.exit is None else verdict.exit)
    assert not list(tmp_path.glob(".chainermn-rt-stop-*"))


@pytest.mark.parametrize("preempt_time, asked, said", [
    ("None", ["-o show job 77", "requeue 77"], "requeueing job 77 (restart 1 of at most 3)"),
    ("2026-12-06T04:26:33", ["-o show job 77"],
     "job 77 was preempted: Slurm requeues it (PreemptMode=REQUEUE)")])
def test_on_slurm_24_11_a_preempted_job_is_left_to_slurm_to_requeue(tmp_path, preempt_time,
                                                                    asked, said):
    """The signal of the time limit (no PreemptTime): the shell requeues the job; of a
    preemption: Slurm 24.11 requeues it itself once the shell ends (slurm_rules.CHANGES)."""
    proc, got = _run(tmp_path, {"STUB_PREEMPT_TIME": preempt_time}, profile="sandbox-debian13")
    assert (proc.returncode, got) == (0, asked), proc.stderr
    assert f"snapshot /out/snapshots/iter_000000120 written; {said}" in proc.stderr


def test_a_failing_step_without_a_signal_keeps_its_status(tmp_path):
    proc, asked = _run(tmp_path, {"STUB_EXIT": "3"}, signal_it=False)
    assert (proc.returncode, asked, proc.stderr) == (3, [], "")


@pytest.mark.parametrize("changes", [{"signal": None}])
def test_without_a_signal_the_script_has_no_stop_handling(tmp_path, changes):
    site = replace(load_site(resolve_site("sandbox")), **changes)
    text = write_script(make_plan(site, Request(nodes=1, command=("true",))),
                        tmp_path / "job.sh").read_text()
    assert "trap" not in text and "--signal" not in text and "requeue" not in text.replace(
        "#SBATCH --requeue", "")
