"""The per-rank step (`chainermn-rt rank`): slot choice, CPU binding, HCA variables, exec."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.rank import binding
from chainermn_rt.rank_contract import RANK_LOG_VAR, SLOTS_VAR, Slot, dump_slots, load_slots

from conftest import PYTHON, REPO, clean_launcher_env, json_objects, run_mpi

SLOTS = [Slot(gpu=g, numa=g // 2, cpus=f"{g}", hcas=(f"mlx5_{g // 2}:1",)) for g in range(4)]


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
    assert (b.slot.gpu, b.device, b.cpus) == (gpu, device, [gpu])
    # UCX: the rank's own NIC; NCCL: every NIC of the node, the same on every rank
    assert b.env == {"UCX_NET_DEVICES": f"mlx5_{gpu // 2}:1", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}


# dgx-h100's shape: GPUs 0-3 on NUMA node 0, 4-7 on 1, one HCA each
DGX = [Slot(gpu=g, numa=g // 4, cpus=f"{14 * g}-{14 * g + 13}", hcas=(f"mlx5_{h}:1",))
       for g, h in enumerate((0, 3, 4, 5, 6, 9, 10, 11))]
DGX_HCAS = "=" + ",".join(s.hcas[0] for s in DGX)


def test_one_rank_given_gpu_5_under_constrain_devices_binds_to_gpu_5():
    """ConstrainDevices=yes: CUDA_VISIBLE_DEVICES=0 inside the step, SLURM_STEP_GPUS=5."""
    b = binding(DGX, _slurm(0, 1, "0") | {"SLURM_STEP_GPUS": "5"})
    assert (b.slot.gpu, b.slot.numa, b.device, b.cpus) == (5, 1, 0, list(range(70, 84)))
    assert b.env == {"UCX_NET_DEVICES": "mlx5_9:1", "NCCL_IB_HCA": DGX_HCAS}


@pytest.mark.parametrize("local, gpu, hca", [(0, 2, "mlx5_4:1"), (1, 6, "mlx5_10:1")])
def test_two_ranks_given_gpus_2_and_6_bind_to_them(local, gpu, hca):
    b = binding(DGX, _slurm(local, 2, "0,1") | {"SLURM_STEP_GPUS": "2,6"})
    assert (b.slot.gpu, b.device, b.env["UCX_NET_DEVICES"]) == (gpu, local, hca)


def test_the_batch_steps_gpu_list_when_the_step_has_none():
    """mpirun from the batch shell: SLURM_JOB_GPUS; SLURM_STEP_GPUS first where both are set."""
    assert binding(DGX, _slurm(0, 1, "0") | {"SLURM_JOB_GPUS": "7"}).slot.gpu == 7
    both = {"SLURM_STEP_GPUS": "3", "SLURM_JOB_GPUS": "3,4"}
    assert binding(DGX, _slurm(0, 1, "0") | both).slot.gpu == 3


def test_without_slurms_gpu_list_cuda_visible_devices_names_the_gpu():
    assert binding(DGX, _slurm(0, 1, "5")).slot.gpu == 5
    assert binding(DGX, _slurm(1, 2, "4,7")).slot.gpu == 7


@pytest.mark.parametrize("value", ["5,x", "-1", "GPU-5", "5;6", "1,,2", " ", "²", "2"])
def test_a_malformed_slurm_gpu_list_is_one_clear_error(value):
    env = _slurm(1, 2, "0,1") | {"SLURM_STEP_GPUS": value}
    if not value.strip():  # empty: as unset
        assert binding(DGX, env).slot.gpu == 1
        return
    with pytest.raises(UserError, match=r"^environment variable SLURM_STEP_GPUS=.*; allowed: "
                                        r"the node's GPU indices, comma-separated integers"):
        binding(DGX, env)  # "2": no entry for the rank's device 1


def test_nccl_sees_the_same_hcas_on_every_rank_of_a_node():
    seen = {binding(SLOTS, _slurm(local, 4, "0,1,2,3")).env["NCCL_IB_HCA"] for local in range(4)}
    assert seen == {"=mlx5_0:1,mlx5_1:1"}


def test_explicit_hca_variables_win():
    env = _slurm(0, 1, "0") | {"NCCL_IB_HCA": "=mlx5_7:1"}
    assert binding(SLOTS, env).env == {"UCX_NET_DEVICES": "mlx5_0:1"}


def test_cpu_slots_by_local_rank_and_too_many_ranks():
    cpu = [Slot(gpu=None, numa=0, cpus="0-1"), Slot(gpu=None, numa=1, cpus="2-3")]
    assert binding(cpu, _slurm(1, 2, "")).cpus == [2, 3]
    with pytest.raises(UserError, match="local rank 2 has no slot"):
        binding(cpu, _slurm(2, 3, ""))


def test_more_ranks_than_gpus_is_a_clear_error():
    with pytest.raises(UserError, match="3 ranks on this node but only 2 GPUs visible"):
        binding(SLOTS, _slurm(0, 3, "0,1"))


def test_a_rank_whose_local_rank_is_not_reported_is_refused():
    """A bare PMIx server names the global rank only: no slot or GPU can be chosen."""
    with pytest.raises(UserError, match="launcher pmix does not report this rank's local rank"):
        binding(SLOTS, {"PMIX_RANK": "2"})


def _rank_env(**extra):
    return clean_launcher_env() | extra


def test_rank_step_execs_the_command_with_argv_intact(tmp_path):
    hostile = ["a b", "'", '"', ";", "$(id)", "`id`", "x\ny", "é ✓", ""]
    env = _rank_env(**{SLOTS_VAR: dump_slots(SLOTS[:1]), RANK_LOG_VAR: str(tmp_path / "%r.log"),
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
    slots = [Slot(gpu=None, numa=0, cpus="0", hcas=("hca_a:1",)),
             Slot(gpu=None, numa=0, cpus="1", hcas=("hca_b:1",))]
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("this test needs 2 CPUs")
    proc = run_mpi(2, ["-m", "chainermn_rt", "rank", "--", sys.executable,
                       str(REPO / "tests/programs/report_rank.py")],
                   env=_rank_env(**{SLOTS_VAR: dump_slots(slots)}) | {"CUDA_VISIBLE_DEVICES": ""})
    seen = sorted(json_objects(proc.stdout),
                  key=lambda r: r["rank"])
    assert [(r["rank"], r["local_rank"], r["cpus"], r["ucx"]) for r in seen] == [
        (0, 0, [0], "hca_a:1"), (1, 1, [1], "hca_b:1")]


def test_verbose_rank_says_where_it_runs(tmp_path):
    env = _rank_env(**{SLOTS_VAR: dump_slots(SLOTS[:2]), "CHAINERMN_RT_VERBOSE": "1",
                       "CUDA_VISIBLE_DEVICES": "0,1"}) | _slurm(1, 2, "0,1")
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "rank", "--", "true"],
                          env=env, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith(": GPU 1 of CUDA_VISIBLE_DEVICES=0,1, CPUs 1, HCA mlx5_0:1\n")
    assert proc.stdout.startswith("rank 1/2 (local 1/2) on ")


def test_a_gpu_in_no_slot_binds_by_local_rank_and_says_so():
    """GPU 9 on a node whose profile lists GPUs 0-7: local rank 0's slot, and one warning."""
    b = binding(DGX, _slurm(0, 1, "0") | {"SLURM_STEP_GPUS": "9"})
    assert (b.slot.gpu, b.unlisted_gpu) == (0, "9")
    assert binding(DGX, _slurm(0, 1, "0") | {"SLURM_STEP_GPUS": "5"}).unlisted_gpu is None
    env = _rank_env(**{SLOTS_VAR: dump_slots(DGX), "CUDA_VISIBLE_DEVICES": "0",
                       "SLURM_STEP_GPUS": "9"})
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "rank", "--", "true"],
                          env=env, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    # the first line (a CPU-binding warning may follow where CPU 0 is not this task's)
    assert proc.stderr.splitlines()[0] == (f"chainermn-rt rank: warning: GPU 9 is in no slot "
                                           f"of {SLOTS_VAR} (the profile's topology); binding "
                                           "by local rank 0")
    assert proc.stderr.count("GPU 9") == 1, proc.stderr


def test_slot_table_round_trips_in_the_format_scripts_carry():
    text = '[{"gpu":null,"numa":1,"cpus":"0-1,4","hcas":[]},{"gpu":3,"numa":0,"cpus":"2",' \
           '"hcas":["mlx5_0:1","mlx5_1:1"]}]'
    slots = load_slots(text)
    assert slots == (Slot(gpu=None, numa=1, cpus="0-1,4"),
                     Slot(gpu=3, numa=0, cpus="2", hcas=("mlx5_0:1", "mlx5_1:1")))
    assert slots[0].cpu_ids == [0, 1, 4] and dump_slots(slots) == text


@pytest.mark.parametrize("raw, problem", [
    ("[{", "Expecting"),
    ('{"gpu":0}', "not a list"),
    ('[{"gpu":0,"numa":0,"cpus":"0"}]', "keys gpu, numa, cpus, hcas"),
    ('[{"gpu":-1,"numa":0,"cpus":"0","hcas":[]}]', "gpu: -1"),
    ('[{"gpu":0,"numa":true,"cpus":"0","hcas":[]}]', "numa: True"),
    ('[{"gpu":0,"numa":0,"cpus":"0 to 3","hcas":[]}]', "'0 to 3' is not a CPU list"),
    ('[{"gpu":0,"numa":0,"cpus":"0","hcas":["mlx5_0"]}]', "hcas: ['mlx5_0']"),
])
def test_a_bad_slot_table_names_the_variable(raw, problem):
    with pytest.raises(UserError) as err:
        load_slots(raw)
    assert str(err.value).startswith(f"{SLOTS_VAR}: ") and problem in str(err.value)


def test_rank_step_with_a_bad_slot_table_exits_2_with_one_line():
    proc = subprocess.run([sys.executable, "-m", "chainermn_rt", "rank", "--", "true"],
                          env=_rank_env(**{SLOTS_VAR: "[{\"gpu\": 0}]"}), capture_output=True,
                          text=True, cwd=REPO)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert SLOTS_VAR in proc.stderr and "Traceback" not in proc.stderr


def test_rank_step_and_its_contract_do_not_import_the_plan():
    code = ("import sys, chainermn_rt.rank; "
            "print(sorted(m for m in sys.modules if m in ('chainermn_rt.plan', "
            "'chainermn_rt.site', 'jinja2', 'tomllib')))")
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=REPO,
                         check=True).stdout
    assert out.strip() == "[]"
