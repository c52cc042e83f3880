"""bench/gpu_check.sh and what it uses, as far as a machine without a GPU can check them."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile

import pytest

from conftest import PYTHON, REPO, require_commands

SCRIPT = REPO / "bench/gpu_check.sh"


def _script(*args, env=None):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, env=env, check=False)


@pytest.fixture(scope="module")
def offline_wheels(tmp_path_factory):
    out = tmp_path_factory.mktemp("offline-wheels")
    proc = subprocess.run([PYTHON, "bench/offline_wheels.py", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def test_offline_wheels_fit_and_hold_the_patched_chainer(offline_wheels):
    wheels = sorted(p.name for p in offline_wheels.glob("*.whl"))
    assert sum(p.stat().st_size for p in offline_wheels.iterdir()) <= 64 * 2**20
    chainer = next(offline_wheels.glob("chainer-7.8.1*.whl"))
    with zipfile.ZipFile(chainer) as whl:
        assert "chainermn/__init__.py" in whl.namelist()
    assert any(w.startswith("chainermn_rt-") for w in wheels)
    assert any(w.startswith("pytest-") for w in wheels)
    # nothing the GPU machine brings itself
    assert not any(w.startswith(("numpy-", "cupy", "mpi4py-", "torch-")) for w in wheels)
    binary = [w for w in wheels if not w.endswith("-none-any.whl")]
    assert all("cp312" in w or "abi3" in w for w in binary), binary


def test_shellcheck_clean():
    require_commands("shellcheck")
    proc = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout


def test_dry_run_lists_every_step(offline_wheels, tmp_path):
    proc = _script(str(offline_wheels), "--dry-run", env=dict(os.environ, OUT=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    summary = proc.stdout.split("== summary", 1)[1]
    for name in ("GPU-marked tests", "setup() on one rank chooses pure_nccl",
                 "chainer fix set (CuPy fixes included)", "ResNet-50 example, batch 64",
                 "ResNet-50 example, batch 128", "ResNet-50 step, Chainer, batch 128",
                 "ResNet-50 step, PyTorch eager, batch 64"):
        assert f"dry   {name}" in summary, name
    assert "pytest -m gpu" in proc.stdout and not (tmp_path / "venv").exists()


@pytest.mark.parametrize("args, env, message", [
    ((), {}, "bench/gpu_check.sh WHEELS"),
    (("/nonexistent",), {}, "WHEELS=/nonexistent holds no chainer and chainermn_rt wheels"),
    (("WHEELS", "--fast"), {}, "unknown option --fast; allowed: --dry-run"),
    (("WHEELS",), {"ITERATIONS": "many"}, "ITERATIONS=many must be a whole number"),
])
def test_bad_arguments_exit_2_with_one_line(offline_wheels, args, env, message):
    args = tuple(str(offline_wheels) if a == "WHEELS" else a for a in args)
    proc = _script(*args, env=dict(os.environ, **env))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_resnet50_step_runs_on_the_cpu():
    proc = subprocess.run([PYTHON, "bench/resnet50_gpu.py", "--device", "cpu", "--insize", "32",
                           "--batch", "2", "--iterations", "1", "--warmup", "1", "--n-class",
                           "10"], cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["framework"] == "chainer" and result["images_per_s"] > 0
    assert result["what"].startswith("chainer 7.8.1")


def test_resnet50_step_refuses_a_too_small_image():
    proc = subprocess.run([PYTHON, "bench/resnet50_gpu.py", "--insize", "16"], cwd=REPO,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "--insize must be at least 32" in proc.stderr
    assert "Traceback" not in proc.stderr
