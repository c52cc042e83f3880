"""The stall watchdog and the start-up limit: settings, the diagnosis, and real ranks under
``mpirun`` (tests/programs/stall_rank.py: rank 1 misbehaves before iteration 4). The timeouts
only stop a hang from blocking the suite; no test checks a duration."""

from __future__ import annotations

import socket
import subprocess

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.rank_contract import (
    RANK_PID_VAR,
    STALL_ACTION_VAR,
    STALL_TIMEOUT_VAR,
    START_TIMEOUT_VAR,
)
from chainermn_rt.watchdog import Progress
from chainermn_rt.watchdog.diagnosis import Report, diagnose, ranks_text
from chainermn_rt.watchdog.settings import read

from conftest import PYTHON, REPO, clean_launcher_env, mpirun_argv

STALL = str(REPO / "tests" / "programs" / "stall_rank.py")
HOST = socket.gethostname()


@pytest.mark.parametrize("name, value", [
    (STALL_TIMEOUT_VAR, "soon"), (STALL_TIMEOUT_VAR, "-1"), (STALL_TIMEOUT_VAR, "0.5"),
    (STALL_TIMEOUT_VAR, "nan"), (START_TIMEOUT_VAR, "1e9"), (STALL_ACTION_VAR, "kill")])
def test_a_bad_setting_names_the_variable(name, value):
    with pytest.raises(UserError, match=f"environment variable {name}=.*; allowed: "):
        read({name: value})


def test_settings_default_and_switch_off():
    assert read({}).stall_timeout == read({}).start_timeout == 600
    assert read({}).silent_timeout == 30
    off = read({STALL_TIMEOUT_VAR: "0", START_TIMEOUT_VAR: "0", STALL_ACTION_VAR: "warn"})
    assert (off.stall_timeout, off.start_timeout, off.action) == (0, 0, "warn")


def test_progress_counts_iterations_like_the_multi_node_optimizer():
    p = Progress()
    p.enter("bcast_data")            # iteration 1 broadcasts the parameters
    assert (p.seq, p.iteration, p.op) == (1, 1, "bcast_data")
    p.leave()
    for _ in range(2):               # iterations 2 and 3 average gradients
        p.enter("multi_node_mean_grad")
        p.enter("allreduce_grad")    # nested: the outer call counts
        p.leave()
        p.leave()
    assert (p.seq, p.iteration, p.op) == (3, 3, None)


def test_ranks_text():
    assert ranks_text([4]) == "rank 4"
    assert ranks_text([0, 1, 2, 5, 7, 8]) == "ranks 0-2,5,7-8"


def test_autowatch_wraps_chainermn_create_communicator_once_imported():
    code = ("from chainermn_rt.watchdog import autowatch; autowatch.install(); import chainermn; "
            "print(chainermn.create_communicator._chainermn_rt_watched)")
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120,
                          env=clean_launcher_env())
    assert proc.stdout == "True\n", proc.stderr


@pytest.mark.parametrize("rank_pid, armed", [(None, True), ("1", False)],
                         ids=["the-rank", "a-process-it-started"])
def test_the_start_up_limit_applies_to_the_ranks_own_process_only(rank_pid, armed):
    code = ("import time; from chainermn_rt.watchdog import startup; print(startup.arm()); "
            "time.sleep(2)")
    env = clean_launcher_env() | {START_TIMEOUT_VAR: "2", "SLURM_STEP_ID": "0",
                                  "SLURM_PROCID": "5"}
    if rank_pid:
        env[RANK_PID_VAR] = rank_pid
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60,
                          env=env)
    assert proc.stdout == f"{armed}\n"
    said = f"chainermn-rt: rank 5 on {HOST} has not begun MPI start-up 1 s after it started"
    assert (said in proc.stderr) is armed, proc.stderr


def _r(seq, op, seconds, iteration=7):
    return Report(seq, iteration, op, seconds)


def test_no_stall_below_the_timeout():
    reports = {0: _r(5, "bcast_obj", 59.0), 1: _r(4, None, 59.0)}
    assert diagnose(reports, {}, {0: 0, 1: 29}, timeout=60, silent_timeout=30) is None


def test_a_silent_rank_and_a_rank_that_never_reported_are_named():
    reports = {0: _r(5, "allreduce_obj", 90.0), 1: _r(4, "bcast_obj", 1.0), 2: None}
    line = diagnose(reports, {0: "a", 1: "b"}, {0: 1, 1: 95, 2: 95}, timeout=60,
                    silent_timeout=30)
    assert line == ("stall: rank 0 waits in allreduce_obj (iteration 7) for 90 s; not arrived: "
                    "rank 1 on b (silent for 95 s: dead, wedged or its node lost; last in "
                    "bcast_obj, iteration 7); rank 2 (silent for 95 s: dead, wedged or its node "
                    "lost; never reported)")


def test_a_silent_rank_ends_the_wait_long_before_the_stall_timeout():
    reports = {0: _r(5, "multi_node_mean_grad", 31.0), 1: _r(5, "multi_node_mean_grad", 31.0),
               2: _r(4, None, 0.5)}
    line = diagnose(reports, {2: "node2"}, {0: 0, 1: 0, 2: 31}, timeout=600, silent_timeout=30)
    assert line.startswith("stall: ranks 0-1 wait in multi_node_mean_grad (iteration 7) for 31 s;"
                           " not arrived: rank 2 on node2 (silent for 31 s: dead, wedged or its "
                           "node lost; last between collectives"), line


def test_ranks_lost_together_are_all_called_silent():
    """CI: node2's ranks died at once; rank 3 had reported 5 s (one interval) after rank 2, so
    it was 25 s unheard when rank 2 crossed 30 s, and was described as still waiting."""
    reports = {0: _r(5, "multi_node_mean_grad", 30.0), 1: _r(5, "multi_node_mean_grad", 30.0),
               2: _r(4, "multi_node_mean_grad", 0.5), 3: _r(4, "multi_node_mean_grad", 0.5)}
    silent = {0: 0, 1: 0, 2: 30, 3: 25}
    line = diagnose(reports, {2: "node2", 3: "node2"}, silent, timeout=600, silent_timeout=30)
    assert "rank 3 on node2 (silent for 25 s: dead, wedged or its node lost;" in line, line
    # a rank heard recently is still described by its report
    line = diagnose(reports, {2: "node2", 3: "node2"}, {**silent, 3: 14}, timeout=600,
                    silent_timeout=30)
    assert "rank 3 on node2 (in multi_node_mean_grad" in line, line


def test_every_rank_in_the_collective_blames_the_collective():
    reports = {0: _r(5, "multi_node_mean_grad", 70.0), 1: _r(5, "multi_node_mean_grad", 69.0)}
    line = diagnose(reports, {}, {0: 0, 1: 0}, timeout=60, silent_timeout=30)
    assert line.endswith("every rank is in it, so the collective itself does not complete "
                         "(network or NCCL)")


def _mpirun(n, *args, **env) -> subprocess.CompletedProcess:
    argv = mpirun_argv(n) + [PYTHON, "-m", "chainermn_rt", "rank", "--", PYTHON, STALL, *args]
    return subprocess.run(argv, env=clean_launcher_env() | env, capture_output=True, text=True,
                          cwd=REPO, timeout=300)


@pytest.mark.mpi
@pytest.mark.parametrize("plain", [False, True], ids=["setup", "unmodified-chainermn"])
def test_a_rank_in_an_endless_loop_is_named_and_the_job_aborted(plain):
    proc = _mpirun(3, "--how", "loop", *(["--plain"] if plain else []),
                   **{STALL_TIMEOUT_VAR: "3"})
    assert proc.returncode != 0
    lines = [x for x in proc.stderr.splitlines() if x.startswith("chainermn-rt: stall:")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("chainermn-rt: stall: ranks 0,2 wait in multi_node_mean_grad "
                               "(iteration 4) for "), lines
    assert f"; not arrived: rank 1 on {HOST} (after iteration 3, outside collectives for " \
        in lines[0] and lines[0].endswith(" s); aborting the job")
    assert "5 iterations done" not in proc.stdout


@pytest.mark.mpi
def test_warn_only_names_the_late_rank_once_and_the_job_goes_on():
    proc = _mpirun(2, "--how", "late", "--seconds", "6",
                   **{STALL_TIMEOUT_VAR: "2", STALL_ACTION_VAR: "warn"})
    assert proc.returncode == 0, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if "stall:" in x]
    assert len(lines) == 1 and lines[0].startswith(
        "chainermn-rt: warning: stall: rank 0 waits in multi_node_mean_grad (iteration 4)"), lines
    assert proc.stdout.count("5 iterations done") == 2


@pytest.mark.mpi
def test_a_rank_that_never_starts_mpi_is_named_and_start_up_ends():
    proc = _mpirun(2, "--how", "startup", "--seconds", "120", **{START_TIMEOUT_VAR: "6"})
    assert proc.returncode != 0
    lines = [x for x in proc.stderr.splitlines() if x.startswith("chainermn-rt:")]
    assert f"chainermn-rt: rank 1 on {HOST} has not begun MPI start-up 3 s after it started; " \
           "the others wait for it" in lines, proc.stderr
    assert f"chainermn-rt: rank 0 on {HOST}: MPI start-up not complete 6 s after it began; " \
           "ending the job (a rank that has not begun it says so above)" in lines, proc.stderr
