"""``chainermn_rt.setup()`` and ``chainermn-rt env`` on real ranks."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from chainermn_rt.cli import main

from conftest import PYTHON, REPO, json_objects, mpirun_argv, run_mpi


@pytest.mark.mpi
@pytest.mark.parametrize("name, expected", [("auto", "ChunkedCommunicator"),
                                            ("chunked", "ChunkedCommunicator"),
                                            ("naive", "NaiveCommunicator")])
def test_setup_two_ranks(name, expected):
    proc = run_mpi(2, ["tests/programs/setup_rank.py", "--communicator", name])
    rows = json.loads(proc.stdout)
    assert rows == [{"rank": r, "size": 2, "communicator": expected, "device": "@numpy",
                     "start_method": "forkserver", "abort_hook": True, "intra_rank": r}
                    for r in (0, 1)]


@pytest.mark.mpi
def test_one_failing_rank_ends_the_job():
    """Rank 1 raises while rank 0 waits for it: MPI_Abort must end both, not hang."""
    proc = subprocess.run(mpirun_argv(2) + [PYTHON, "tests/programs/setup_rank.py",
                                            "--fail-rank", "1"],
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert proc.returncode != 0
    assert "rank 1 fails on purpose" in proc.stderr
    assert "failed: RuntimeError: rank 1 fails on purpose; aborting the job" in proc.stderr


def test_setup_refuses_a_launcher_mpi_mismatch():
    """Slurm step variables, but MPI started alone (singleton): every rank would be 0 of 1."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "SLURM_"))}
    env.update(SLURM_STEP_ID="0", SLURM_PROCID="1", SLURM_LOCALID="1", SLURM_NODEID="0",
               SLURM_STEP_NUM_TASKS="2", SLURM_STEP_TASKS_PER_NODE="2", SLURM_STEP_NUM_NODES="1")
    proc = subprocess.run([PYTHON, "-c", "import chainermn_rt; chainermn_rt.setup()"],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
                          check=False)
    assert proc.returncode != 0
    assert "LauncherMismatch: launcher slurm says rank 1 of 2 but MPI says rank 0 of 1" \
        in proc.stderr


@pytest.mark.mpi
def test_env_command_json_with_mpi():
    proc = run_mpi(2, ["-m", "chainermn_rt", "env", "--json", "--mpi"])
    rows = sorted(json_objects(proc.stdout),
                  key=lambda r: r["global_rank"])
    assert [(r["launcher"], r["global_rank"], r["world_size"], r["local_rank"], r["mpi"])
            for r in rows] == [("openmpi", 0, 2, 0, "agrees"), ("openmpi", 1, 2, 1, "agrees")]
    assert all(r["device"] is None and "CUDA_VISIBLE_DEVICES" in r for r in rows)


def test_env_command_reads_slurm_variables(monkeypatch, capsys):
    for key in list(os.environ):
        if key.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_")):
            monkeypatch.delenv(key)
    for key, value in {"SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
                           "SLURM_NODEID": "1", "SLURM_STEP_NUM_TASKS": "4",
                           "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_NUM_NODES": "2",
                           "CUDA_VISIBLE_DEVICES": "3,1"}.items():
        monkeypatch.setenv(key, value)
    assert main(["env"]) == 0
    assert capsys.readouterr().out.startswith(
        "slurm: rank 3/4, local 1/2, node 1/2 on ")
    assert main(["env", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["device"], row["CUDA_VISIBLE_DEVICES"], row["node_index"]) == (1, "3,1", 1)


def test_env_command_bad_variable_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setenv("SLURM_PROCID", "x")
    for key in list(os.environ):
        if key.startswith(("OMPI_", "PMI_")):
            monkeypatch.delenv(key)
    assert main(["env"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "SLURM_PROCID='x'" in err


@pytest.mark.gpu
@pytest.mark.mpi
def test_setup_on_a_gpu_picks_pure_nccl():
    proc = run_mpi(1, ["tests/programs/setup_rank.py"],
                   env={**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get(
                       "CUDA_VISIBLE_DEVICES", "0").split(",")[0]})
    (row,) = json.loads(proc.stdout)
    assert (row["communicator"], row["device"]) == ("PureNcclCommunicator", "@cupy:0")
