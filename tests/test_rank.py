"""The per-rank step (`chainermn-rt rank`): slot choice, CPU binding, HCA variables, exec."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.plan import RANK_LOG_VAR, SLOTS_VAR
from chainermn_rt.rank import binding

from conftest import REPO, clean_launcher_env, json_objects, run_mpi

SLOTS = [{"gpu": g, "numa": g // 2, "cpus": f"{g}", "hcas": [f"mlx5_{g // 2}:1"]}
         for g in range(4)]


def _slurm(local, tasks, visible):
    env = {"SLURM_STEP_ID": "0", "SLURM_PROCID": str(local), "SLURM_LOCALID": str(local),
           "SLURM_NODEID": "0", "SLURM_STEP_NUM_TASKS": str(tasks),
           "SLURM_STEP_TASKS_PER_NODE": str(tasks), "SLURM_STEP_NUM_NODES": "1"}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return env


@pytest.mark.parametrize("local, tasks, visible, gpu, device", [
    (1, 4, "0,1,2,3", 1, 1),       # --gpus-per-node=4: every GPU visible, device = local rank
    (1, 2, "2,3", 3, 1),           # Slurm gave GPUs 2,3: the slot of physical GPU 3
    (0, 1, "3", 3, 0),             # per-task binding: one visible GPU
    (1, 2, "3,1", 1, 1),           # an explicit list
])
def test_slot_follows_the_physical_gpu(local, tasks, visible, gpu, device):
    b = binding(SLOTS, _slurm(local, tasks, visible))
    assert (b.slot["gpu"], b.device, b.cpus) == (gpu, device, [gpu])
    assert b.env == {"UCX_NET_DEVICES": f"mlx5_{gpu // 2}:1", "NCCL_IB_HCA": f"=mlx5_{gpu // 2}:1"}


def test_explicit_hca_variables_win():
    env = _slurm(0, 1, "0") | {"NCCL_IB_HCA": "=mlx5_7:1"}
    assert binding(SLOTS, env).env == {"UCX_NET_DEVICES": "mlx5_0:1"}


def test_cpu_slots_by_local_rank_and_too_many_ranks():
    cpu = [{"gpu": None, "numa": 0, "cpus": "0-1", "hcas": []},
           {"gpu": None, "numa": 1, "cpus": "2-3", "hcas": []}]
    assert binding(cpu, _slurm(1, 2, "")).cpus == [2, 3]
    with pytest.raises(UserError, match="local rank 2 has no slot"):
        binding(cpu, _slurm(2, 3, ""))


def test_more_ranks_than_gpus_is_a_clear_error():
    with pytest.raises(UserError, match="3 ranks on this node but only 2 GPUs visible"):
        binding(SLOTS, _slurm(0, 3, "0,1"))


def _rank_env(**extra):
    return clean_launcher_env() | extra


def test_rank_step_execs_the_command_with_argv_intact(tmp_path):
    hostile = ["a b", "'", '"', ";", "$(id)", "`id`", "x\ny", "é ✓", ""]
    env = _rank_env(**{SLOTS_VAR: json.dumps(SLOTS[:1]), RANK_LOG_VAR: str(tmp_path / "%r.log"),
                       "CUDA_VISIBLE_DEVICES": "0"})
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "rank", "--", sys.executable,
                           str(REPO / "tests/programs/report_rank.py"), *hostile],
                          env=env, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads((tmp_path / "0.log").read_text())
    assert seen["argv"] == hostile
    assert seen["cpus"] == [0] and seen["ucx"] == "mlx5_0:1" and seen["device"] == 0


def test_rank_step_reports_a_missing_program():
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "rank", "--", "no-such-prog"],
                          env=_rank_env(), capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 127 and "cannot run 'no-such-prog'" in proc.stderr


def test_two_real_ranks_bind_to_their_slots():
    """mpirun -np 2: each rank of the node gets its slot's CPU."""
    slots = [{"gpu": None, "numa": 0, "cpus": "0", "hcas": ["hca_a:1"]},
             {"gpu": None, "numa": 0, "cpus": "1", "hcas": ["hca_b:1"]}]
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("this test needs 2 CPUs")
    proc = run_mpi(2, ["-m", "chainermn_rt", "rank", "--", sys.executable,
                       str(REPO / "tests/programs/report_rank.py")],
                   env=_rank_env(**{SLOTS_VAR: json.dumps(slots)}) | {"CUDA_VISIBLE_DEVICES": ""})
    seen = sorted(json_objects(proc.stdout),
                  key=lambda r: r["rank"])
    assert [(r["rank"], r["local_rank"], r["cpus"], r["ucx"]) for r in seen] == [
        (0, 0, [0], "hca_a:1"), (1, 1, [1], "hca_b:1")]


def test_verbose_rank_says_where_it_runs(tmp_path):
    env = _rank_env(**{SLOTS_VAR: json.dumps(SLOTS[:2]), "CHAINERMN_RT_VERBOSE": "1",
                       "CUDA_VISIBLE_DEVICES": "0,1"}) | _slurm(1, 2, "0,1")
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "rank", "--", "true"],
                          env=env, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith(": GPU 1 of CUDA_VISIBLE_DEVICES=0,1, CPUs 1, HCA mlx5_0:1\n")
    assert proc.stdout.startswith("rank 1/2 (local 1/2) on ")
