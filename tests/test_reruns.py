"""The suite's one rerun: a test of real ranks that failed on Open MPI's MPI_Init crash
(conftest.mpi_init_segfault) runs once more; any other failure counts as it is."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO, mpi_init_segfault

SUITE_CONFTEST = REPO / "tests" / "conftest.py"
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
    assert "2 failed, 2 passed, 2 rerun" in out, out
    for name in ("test_crashed_job", "test_crashed_ranks"):
        assert f"RERUN test_cases.py::{name}" in out, out
    for name in ("test_wrong_result", "test_crash_outside_mpi"):
        assert f"FAILED test_cases.py::{name}" in out, out


def test_the_crash_is_told_apart_by_what_the_ranks_printed():
    assert mpi_init_segfault(CRASH) and mpi_init_segfault(CRASH, started="ranks, communicator")
    assert not mpi_init_segfault(CRASH + "\n4 ranks, communicator pure_nccl",
                                 started="ranks, communicator")
    assert not mpi_init_segfault(CRASH.replace("(nil)", "0x18"))  # a crash of another kind
