"""Debian's Open MPI crash in MPI_Init (chainermn_rt.sandbox.mpi_crash), one policy: a test of
real ranks that failed on it runs once more, a sandbox job that crashed so is submitted once
more (chainermn_rt.submission.Cluster.run), and neither a third time; any other failure, and a
real cluster's job, counts as it is."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from chainermn_rt.errors import JobFailed
from chainermn_rt.sandbox import mpi_crash
from chainermn_rt.sandbox.mpi_crash import crashed_at_start
from chainermn_rt.site import load_site, resolve_site
from chainermn_rt.submission import Cluster, Finished

from conftest import REPO

SUITE_CONFTEST = REPO / "tests" / "conftest.py"
STARTED = " ranks, communicator "
CRASH = """[node1:20433] *** Process received signal ***
[node1:20433] Signal: Segmentation fault (11)
[node1:20433] Signal code: Address not mapped (1)
[node1:20433] Failing at address: (nil)
srun: error: node1: task 0: Segmentation fault"""

# each test fails on its first run with the text given, passes on any later one
TESTS = f'''
import pathlib
import pytest

CRASH = {CRASH!r}


def first_run(name):
    mark = pathlib.Path(name + ".ran")
    first = not mark.exists()
    mark.touch()
    return first


@pytest.mark.slurm
def test_crashed_job():
    assert not first_run("crashed"), "job 7: FAILED\\n" + CRASH


@pytest.mark.mpi
def test_crashed_ranks():
    if first_run("ranks"):
        pytest.fail("mpirun exited 139\\n" + CRASH)


@pytest.mark.slurm
def test_job_crashed_each_time():  # Cluster.run's JobFailed: its job was submitted once more
    assert not first_run("again"), {mpi_crash.again(["7", "8"], None)!r}


@pytest.mark.slurm
def test_wrong_result():
    assert not first_run("wrong"), "job 8: COMPLETED, but the digests differ"


def test_crash_outside_mpi():
    assert not first_run("plain"), CRASH
'''


def test_only_a_failure_showing_the_mpi_init_crash_runs_again(tmp_path):
    (tmp_path / "conftest.py").write_text(  # the suite's conftest, under another name
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('suite', {str(SUITE_CONFTEST)!r})\n"
        "suite = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(suite)\n"
        "pytest_collection_modifyitems = suite.pytest_collection_modifyitems\n")
    (tmp_path / "test_cases.py").write_text(TESTS)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfR", "-p", "no:cacheprovider",
                           "-o", "markers=slurm\n mpi", "test_cases.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = proc.stdout
    assert "3 failed, 2 passed, 2 rerun" in out, out
    for name in ("test_crashed_job", "test_crashed_ranks"):
        assert f"RERUN test_cases.py::{name}" in out, out
    for name in ("test_job_crashed_each_time", "test_wrong_result", "test_crash_outside_mpi"):
        assert f"FAILED test_cases.py::{name}" in out, out


def test_the_crash_is_told_apart_by_what_the_ranks_printed():
    assert crashed_at_start(CRASH) and crashed_at_start(CRASH, started="ranks, communicator")
    assert not crashed_at_start(CRASH + "\n4 ranks, communicator pure_nccl",
                                 started="ranks, communicator")
    assert not crashed_at_start(CRASH.replace("(nil)", "0x18"))  # a crash of another kind


@pytest.mark.slurm
def test_a_sandbox_job_that_crashed_so_is_submitted_once_more(sandbox, tmp_path):
    """Real jobs whose scripts print the crash as Open MPI does: the one that crashed before
    its ranks started runs again, once; one that crashed after, one that failed otherwise and
    a real cluster's (a profile without [sandbox]) do not."""
    said = []

    def job(name: str, first: str, then: str, site: str = "sandbox") -> Finished:
        folder = tmp_path / name
        folder.mkdir()
        script = folder / "job.sh"
        script.write_text("#!/bin/sh\n#SBATCH --partition=cpu --nodes=1 --time=2\n"
                          f"#SBATCH --output={folder}/slurm-%j.out\n"
                          "if [ -e ran ]; then " + then + "; fi\n"
                          "touch ran\n" + first + "\n")
        cluster = Cluster(load_site(resolve_site(site)), sandbox.slurm)
        return cluster.run(script, started=STARTED, timeout=120, say=said.append)

    crash = f"printf '%s\\n' {shlex.quote(CRASH)}; exit 139"
    second, state, _, text = job("before", crash, f"echo '4{STARTED}pure_nccl'; exit 0")
    assert tuple(state) == ("COMPLETED", 0) and STARTED in text, text
    crashed = re.fullmatch(r"job (\d+): Debian's Open MPI 4\.1\.4 crashed in MPI_Init, .*; "
                           r"submitting the job once more", said[0])
    assert len(said) == 1 and crashed and int(crashed[1]) < int(second), said
    with pytest.raises(JobFailed, match=r"^jobs (\d+), (\d+): Debian's .* each time") as err:
        job("twice", crash, crash)
    assert len(said) == 2 and not crashed_at_start(str(err.value)), said
    _, state, _, text = job("after", f"echo '4{STARTED}x'; {crash}", "exit 0")
    # 139 (the shell's status) or 11 (the signal it names): Slurm's records differ on which
    assert state.state == "FAILED" and state.exit_code in (139, 11) and len(said) == 2, text
    _, state, _, _ = job("other", "echo 'Traceback: ValueError'; exit 1", "exit 0")
    assert tuple(state) == ("FAILED", 1) and len(said) == 2
    _, state, _, text = job("real", crash, "exit 0", site="cpu-cluster")
    assert state.state == "FAILED" and state.exit_code in (139, 11) and crashed_at_start(text) \
        and len(said) == 2
