"""Interrupted jobs resume exactly, on the Slurm sandbox: 2 nodes x 2 ranks of MNIST
(tests/programs/resumable_mnist.py, which is examples/train_mnist.py with faults to inject).

Each interrupted job must end with parameters bit-identical to one uninterrupted job's:
requeued from outside with ``scontrol requeue``; stopped by its time-limit signal (the batch
shell asks for a snapshot, then requeues itself); preempted by a job under QOS high (the same,
on Slurm's preemption signal; and when no snapshot comes in time, the one before is used); a
rank killed while writing a snapshot (the set before it stays usable and a new job resumes from
it). Seconds are printed, not checked.
"""

from __future__ import annotations

import re
import time

import pytest

from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.render import render
from chainermn_rt.site import load_site
from chainermn_rt.snapshots import check_set

from conftest import PYTHON, REPO
from fixtures_sandbox import submit_text

pytestmark = pytest.mark.slurm
SITE = REPO / "slurm" / "sites" / "sandbox.toml"
PROGRAM = str(REPO / "tests" / "programs" / "resumable_mnist.py")
MNIST = ["--n-train", "4000", "--n-test", "400", "--unit", "100", "--batchsize", "50",
         "--iterations", "120", "--snapshot-every", "20", "--log-every", "20", "--no-progress"]
DIGEST = re.compile(r"^rank 0 parameters sha256 (\w+)$", re.MULTILINE)


def _submit(sandbox, folder, *args, time_limit="10", sbatch=(), max_requeues=None,
            signal=None) -> str:
    folder.mkdir(exist_ok=True)
    site = SITE
    if max_requeues is not None or signal is not None:
        site = folder / "sandbox.toml"
        text = SITE.read_text().replace('signal = "USR2@60"', f'signal = "{signal or "USR2@60"}"')
        if max_requeues is not None:
            text = text.replace("requeue = true", f"requeue = true\nmax_requeues = {max_requeues}")
        site.write_text(text)
    plan = make_plan(load_site(site), Request(
        nodes=2, gpus_per_node=2, time=time_limit, job_name="resume",
        command=(PYTHON, PROGRAM, *MNIST, "--out", str(folder / "out"), *args)))
    assert plan.world_size == 4
    (folder / "job.sh").write_text(render(plan))
    return sandbox.slurm.submit(folder / "job.sh", list(sbatch), cwd=folder)


def _log(folder, job) -> str:
    """The job's log: every run of it, appended ("" before Slurm created it)."""
    path = folder / f"resume-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def _finish(sandbox, folder, job) -> tuple[str, str]:
    """Wait; (final state, the job's log: every run of it, appended)."""
    started = time.monotonic()
    try:
        state = sandbox.slurm.wait(job, timeout=900, poll=0.5)  # a stuck sandbox, not a speed
    finally:
        sandbox.slurm.run(["scancel", job])
    log = _log(folder, job)
    print(f"\nMEASURED job {job}: {state.state} after {time.monotonic() - started:.0f} s; "
          f"restarts {sandbox.slurm.show(job).get('Restarts')}")
    return state.state, log


def _wait_for_snapshot_40(sandbox, folder, job, timeout=600) -> None:
    """Wait for the job's snapshot of iteration 40. A job that ended first fails with its log,
    so that Open MPI's start-up crash in it gets the rerun conftest gives that crash."""
    path = folder / "out" / "snapshots" / "iter_000000040"
    deadline = time.monotonic() + timeout
    while not path.exists():
        if sandbox.slurm.state(job) is not None:
            pytest.fail(f"job {job} ended before {path} appeared:\n{_log(folder, job)[-3000:]}")
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def uninterrupted(sandbox, tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("uninterrupted")
    state, log = _finish(sandbox, folder, _submit(sandbox, folder))
    assert state == "COMPLETED", log[-3000:]
    assert "resuming from" not in log
    return DIGEST.findall(log)[-1]


def test_a_job_requeued_with_scontrol_resumes_bit_identically(sandbox, tmp_path, uninterrupted):
    job = _submit(sandbox, tmp_path, "--slow-from", "41")
    _wait_for_snapshot_40(sandbox, tmp_path, job)
    proc = sandbox.slurm.run(["scontrol", "requeue", job])
    assert proc.returncode == 0, proc.stderr
    state, log = _finish(sandbox, tmp_path, job)
    assert state == "COMPLETED", log[-3000:]
    assert re.search(r"chainermn-rt: resuming from \S+/iter_0000000[4-9]0 ", log), log[-3000:]
    assert sandbox.slurm.show(job).get("Restarts") == "1"
    assert DIGEST.findall(log) == [uninterrupted]


def _snapshotted_requeued_and_resumed(state: str, log: str, job: str, uninterrupted: str):
    """The job ended well after one snapshot on the signal, one requeue and one resume, with
    an uninterrupted run's parameters."""
    assert state == "COMPLETED", log[-3000:]
    for line in ("SIGUSR2: asking the ranks for a snapshot",
                 "written on the job's request (time limit or preemption)",
                 f"requeueing job {job} (restart 1 of at most 3)", "chainermn-rt: resuming from"):
        assert line in log, f"{line!r} missing:\n{log[-3000:]}"
    assert DIGEST.findall(log) == [uninterrupted]


def test_the_time_limit_signal_snapshots_requeues_and_resumes_bit_identically(
        sandbox, tmp_path, uninterrupted):
    """--time 2 with the sandbox's signal USR2@60: the first run, slowed from iteration 41 to
    2 s an iteration, cannot finish within its limit."""
    job = _submit(sandbox, tmp_path, "--slow-from", "41", time_limit="2")
    state, log = _finish(sandbox, tmp_path, job)
    _snapshotted_requeued_and_resumed(state, log, job, uninterrupted)


def test_a_rank_killed_while_writing_leaves_the_previous_set_usable(sandbox, tmp_path,
                                                                   uninterrupted):
    job = _submit(sandbox, tmp_path, "--kill-writing-at", "60")
    state, log = _finish(sandbox, tmp_path, job)
    assert state == "FAILED" and "rank 1 killed while writing" in log, log[-3000:]
    sets = tmp_path / "out" / "snapshots"
    assert (sets / ".iter_000000060.tmp").is_dir() and not (sets / "iter_000000060").exists()
    assert check_set(sets / "iter_000000040", world_size=4)["iteration"] == 40

    again = _submit(sandbox, tmp_path)  # a new job in the same folder: it finds iteration 40
    state, log = _finish(sandbox, tmp_path, again)
    assert state == "COMPLETED", log[-3000:]
    assert f"resuming from {sets / 'iter_000000040'} (iteration 40)" in log
    assert DIGEST.findall(log) == [uninterrupted]
    assert not (sets / ".iter_000000060.tmp").exists()  # cleared by the next write


def test_an_array_task_requeues_itself_and_without_an_allowance_the_job_just_stops(
        sandbox, tmp_path, uninterrupted):
    """The batch shell's signal sent by hand (what Slurm does at the time limit, at once):
    an array task requeues only itself; with max_requeues = 0 the job stops cleanly after the
    snapshot and is not requeued."""
    task = tmp_path / "task"
    job = _submit(sandbox, task, "--slow-from", "41", sbatch=["--array=7"])
    _wait_for_snapshot_40(sandbox, task, job)
    assert sandbox.slurm.run(["scancel", "--signal=USR2", "--batch", job]).returncode == 0
    state, log = _finish(sandbox, task, job)
    assert state == "COMPLETED", log[-3000:]
    assert f"requeueing job {job}_7 (restart 1 of at most 3)" in log, log[-3000:]
    assert DIGEST.findall(log) == [uninterrupted]

    once = tmp_path / "once"
    job = _submit(sandbox, once, "--slow-from", "41", max_requeues=0)
    _wait_for_snapshot_40(sandbox, once, job)
    assert sandbox.slurm.run(["scancel", "--signal=USR2", "--batch", job]).returncode == 0
    state, log = _finish(sandbox, once, job)
    assert state == "COMPLETED" and sandbox.slurm.show(job).get("Restarts") == "0", log[-3000:]
    assert re.search(r"snapshot \S+/iter_0000000[4-9]\d written; not requeueing \(0 restart\(s\) "
                     r"allowed, 0 done\)", log), log[-3000:]
    assert not DIGEST.findall(log)  # it stopped; a rerun would go on from the snapshot


def _preempt(sandbox, folder, job) -> str:
    """Once the low job has its snapshot of iteration 40, a job under QOS high that needs every
    GPU of both nodes: Slurm preempts the low job for it."""
    _wait_for_snapshot_40(sandbox, folder, job)
    high = submit_text(sandbox, "#!/bin/sh\nsrun true\n",
                       ["--qos=high", "--nodes=2", "--gres=gpu:4", "--job-name=high"])
    assert sandbox.slurm.wait(high, timeout=600, poll=0.5) == ("COMPLETED", 0)
    return high


def _runs(sandbox, *jobs) -> list[list[str]]:
    """sacct's record of every run of the jobs: id, state, QOS, nodes, start, end, submit."""
    out = sandbox.slurm.output(["sacct", "-n", "-P", "-X", "-D", "-j", ",".join(jobs), "-o",
                                "JobID,State,QOS,NodeList,Start,End,Submit"])
    return sorted((line.split("|") for line in out.splitlines()), key=lambda r: r[4])


def test_a_job_preempted_by_qos_high_snapshots_requeues_and_resumes_bit_identically(
        sandbox, tmp_path, uninterrupted):
    """Real preemption (PreemptType=preempt/qos): QOS low's job gets its signal at once, its
    ranks snapshot, the shell requeues it, the high job runs on the same nodes, then the low
    job resumes. sacct shows the three runs in that order."""
    job = _submit(sandbox, tmp_path, "--slow-from", "41", sbatch=["--qos=low"])
    high = _preempt(sandbox, tmp_path, job)
    state, log = _finish(sandbox, tmp_path, job)
    _snapshotted_requeued_and_resumed(state, log, job, uninterrupted)
    runs = _runs(sandbox, job, high)
    print("\nMEASURED sacct:", *("|".join(r) for r in runs), sep="\n  ")
    signalled = re.search(r"chainermn-rt: (\S+) SIGUSR2", log).group(1)
    print(f"MEASURED high submitted {runs[1][6]}, low signalled {signalled}")
    assert [r[:4] for r in runs] == [[job, "REQUEUED", "low", "node[1-2]"],
                                      [high, "COMPLETED", "high", "node[1-2]"],
                                      [job, "COMPLETED", "low", "node[1-2]"]], runs
    assert runs[0][5] <= runs[1][4] and runs[1][5] <= runs[2][4], runs  # one after the other


def test_a_preempted_job_without_a_snapshot_in_time_resumes_from_the_one_before(
        sandbox, tmp_path, uninterrupted):
    """signal = "USR2@10": the shell waits 5 s for a snapshot; the ranks are in a 20 s
    iteration. The shell ends them and requeues the job anyway: it resumes from iteration 40."""
    job = _submit(sandbox, tmp_path, "--slow-from", "41", "--slow-seconds", "20",
                  sbatch=["--qos=low"], signal="USR2@10")
    _preempt(sandbox, tmp_path, job)
    state, log = _finish(sandbox, tmp_path, job)
    assert state == "COMPLETED", log[-3000:]
    sets = tmp_path / "out" / "snapshots"
    for line in ("SIGUSR2: asking the ranks for a snapshot, waiting up to 5 s",
                 "no snapshot within 5 s; the next run resumes from the one before; "
                 f"requeueing job {job} (restart 1 of at most 3)",
                 f"chainermn-rt: resuming from {sets / 'iter_000000040'} (iteration 40)"):
        assert line in log, f"{line!r} missing:\n{log[-3000:]}"
    assert "written on the job's request" not in log
    assert DIGEST.findall(log) == [uninterrupted]
