"""GPU choice per rank, with the CUDA_VISIBLE_DEVICES values Slurm really sets.

The table in ../shared/notes/slurm-sandbox.md: 2 tasks per node with
``--gres=gpu:2`` see ``0,1`` each; ``--gpus-per-task=1`` and ``--gpu-bind=single:1``
give task 0 ``0`` and task 1 ``1``; ``--gpu-bind=map_gpu:3,1`` gives ``3`` and ``1``;
``--gpu-bind=mask_gpu:0x3,0xc`` gives ``0,1`` and ``2,3``.
"""

from __future__ import annotations

import pytest

from chainermn_rt.devices import choose_device, count_gpu_devices, physical_gpu, visible_gpus
from chainermn_rt.errors import UserError

CVD = "CUDA_VISIBLE_DEVICES"


@pytest.mark.parametrize("value, expected", [
    ("0,1", ["0", "1"]), ("3,1", ["3", "1"]), (" 2 , 3 ", ["2", "3"]), ("", []),
    ("NoDevFiles", []), ("-1", []), ("0,-1,1", ["0"]),
    ("GPU-8f6a1c2e-0000-1111-2222-333344445555", ["GPU-8f6a1c2e-0000-1111-2222-333344445555"]),
    ("MIG-GPU-8f6a1c2e/1/0", ["MIG-GPU-8f6a1c2e/1/0"]),
])
def test_visible_gpus(value, expected):
    assert visible_gpus({CVD: value}) == expected


def test_visible_gpus_unset():
    assert visible_gpus({}) is None


@pytest.mark.parametrize("request_, per_task, expected", [
    ("--gres=gpu:2 (all of the node's GPUs visible)", ["0,1", "0,1"], [0, 1]),
    ("--gpus-per-task=1", ["0", "1"], [0, 0]),
    ("--gpu-bind=single:1", ["0", "1"], [0, 0]),
    ("--gpu-bind=map_gpu:3,1", ["3", "1"], [0, 0]),
    ("--gpu-bind=mask_gpu:0x3,0xc", ["0,1", "2,3"], [0, 1]),
    ("explicit list, e.g. a site's CUDA_VISIBLE_DEVICES=3,1", ["3,1", "3,1"], [0, 1]),
    ("no GPU requested on a GPU node", ["", ""], [None, None]),
    ("GPUs hidden", ["NoDevFiles", "NoDevFiles"], [None, None]),
])
def test_slurm_cases_two_tasks_per_node(request_, per_task, expected):
    got = [choose_device(local, 2, {CVD: value}) for local, value in enumerate(per_task)]
    assert got == expected, request_


def test_unset_means_every_gpu_of_the_node():
    assert [choose_device(r, 4, {}, gpu_count=4) for r in range(4)] == [0, 1, 2, 3]
    assert choose_device(0, 1, {}, gpu_count=0) is None


@pytest.mark.parametrize("environ, gpu_count", [
    ({CVD: "0,1"}, None),        # 4 tasks on a node with --gres=gpu:2
    ({}, 2),                     # unset, 2 GPUs in /dev
    ({}, 1),
])
def test_more_local_ranks_than_gpus_is_an_error(environ, gpu_count):
    with pytest.raises(UserError, match=r"4 ranks on this node but only \d GPUs? visible"):
        choose_device(3, 4, environ, gpu_count=gpu_count)


def test_local_rank_out_of_range():
    with pytest.raises(UserError, match="local rank 2 is outside 0..1"):
        choose_device(2, 2, {CVD: "0,1"})


@pytest.mark.parametrize("device, environ, expected", [
    (0, {"SLURM_STEP_GPUS": "5", CVD: "0"}, "5"),          # ConstrainDevices=yes renumbers
    (1, {"SLURM_STEP_GPUS": "2, 6", CVD: "0,1"}, "6"),
    (0, {"SLURM_JOB_GPUS": "07", CVD: "0"}, "7"),          # the batch step's
    (1, {"SLURM_STEP_GPUS": "", CVD: "3,1"}, "1"),         # empty: as unset
    (0, {CVD: "GPU-8f6a1c2e-0000"}, "GPU-8f6a1c2e-0000"),
    (2, {}, "2"),
])
def test_physical_gpu(device, environ, expected):
    assert physical_gpu(device, environ) == expected


@pytest.mark.parametrize("name, value", [
    ("SLURM_STEP_GPUS", "5,x"), ("SLURM_STEP_GPUS", "0"), ("SLURM_JOB_GPUS", "-1,2"),
    ("SLURM_STEP_GPUS", "9" * 12),
])
def test_a_malformed_slurm_gpu_list_names_the_variable(name, value):
    with pytest.raises(UserError, match=rf"^environment variable {name}=.*; allowed: the node's "
                                        r"GPU indices.*here at least 2"):
        physical_gpu(1, {name: value, CVD: "0,1"})


def test_count_gpu_devices(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps"):
        (tmp_path / name).touch()
    assert count_gpu_devices(str(tmp_path)) == 2
