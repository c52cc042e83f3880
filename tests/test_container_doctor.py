"""``chainermn-rt doctor``: real checks here; a fake ucx_info only for what needs a GPU and IB."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from chainermn_rt import doctor

from conftest import PYTHON, REPO, require_commands


def _doctor(*args, env=None):
    return subprocess.run([PYTHON, "-m", "chainermn_rt", "doctor", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=env, check=False)


def test_doctor_on_this_machine_passes_the_cpu_checks():
    require_commands("ompi_info", "mpirun")
    proc = _doctor("--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = {c["name"]: c["status"] for c in json.loads(proc.stdout)}
    assert status == {"flavor": "ok", "mpi": "ok", "mpi-cuda": "n/a", "ucx": "n/a", "nccl": "n/a",
                      "mpi4py": "ok", "imports": "ok", "versions": "ok"}


def test_image_mode_outside_an_image_fails_with_the_reason(tmp_path):
    proc = _doctor("--image", env=dict(os.environ, CHAINERMN_RT_VERSIONS=str(tmp_path / "none")))
    assert proc.returncode == 1
    assert any(line.startswith("FAIL  flavor") and "not a chainermn-rt image" in line
               for line in proc.stdout.splitlines()), proc.stdout


def test_cuda_flag_is_read_from_ompi_info():
    key = "mca:mpi:base:param:mpi_built_with_cuda_support:value"
    assert doctor.cuda_mpi_check("gpu", {key: "true"}).status == "ok"
    failed = doctor.cuda_mpi_check("gpu", {key: "false"})
    assert failed.status == "FAIL" and "not CUDA-aware" in failed.reason
    assert doctor.cuda_mpi_check("cpu", {key: "false"}).status == "n/a"


@pytest.fixture
def fake_ucx_info(tmp_path, monkeypatch):
    """A ucx_info printing what a GPU + InfiniBand node prints (neither exists here)."""
    def install(devices: str, build: str = ""):
        tool = tmp_path / "ucx_info"
        tool.write_text(f"#!/bin/sh\nif [ \"$1\" = -b ]; then cat <<'EOF'\n{build}\nEOF\n"
                        f"else cat <<'EOF'\n{devices}\nEOF\nfi\n")
        tool.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    return install


def test_ucx_needs_cuda_and_ib_transports(fake_ucx_info):
    fake_ucx_info("#      Transport: cuda_copy\n#      Transport: gdr_copy\n"
                  "#      Transport: rc_verbs\n#      Transport: ud_mlx5\n#      Transport: tcp\n")
    ok = doctor.ucx_check("gpu")
    assert ok.status == "ok" and "cuda_copy" in ok.reason and "rc_verbs" in ok.reason
    fake_ucx_info("#      Transport: tcp\n#      Transport: posix\n")
    assert doctor.ucx_check("gpu").status == "FAIL"


def test_ucx_without_an_hca_accepts_a_build_with_ib(fake_ucx_info):
    fake_ucx_info("#      Transport: cuda_copy\n#      Transport: tcp\n",
                  build='#define uct_MODULES ":cma:ib:rdmacm"')
    assert doctor.ucx_check("gpu").reason.endswith("ib: ib (built; no HCA here)")
    assert doctor.ucx_check("cpu").status == "n/a"


def test_nccl_is_required_in_the_gpu_flavour():
    try:
        import cupy  # noqa: F401
    except ImportError:
        failed = doctor.nccl_check("gpu")
        assert failed.status == "FAIL" and "cupy" in failed.reason
    assert doctor.nccl_check("cpu").status == "n/a"


def test_a_wrong_version_fails():
    versions = {"flavor": "cpu", "python": {"numpy": "0.0.1"}, "system": {"openmpi": "4.1.4"}}
    check = doctor.versions_check(True, versions, {"ompi:version:full": "4.1.4"})
    assert check.status == "FAIL" and "numpy" in check.reason and "(want 0.0.1)" in check.reason


def test_lines_are_aligned():
    line = doctor.format_line(doctor.Check("mpi4py", "n/a", "why"))
    assert line == "n/a   mpi4py         why"


def test_an_unreadable_versions_file_fails_the_flavor_check(tmp_path):
    (tmp_path / "VERSIONS").mkdir()  # reading it raises IsADirectoryError
    env = dict(os.environ, CHAINERMN_RT_VERSIONS=str(tmp_path / "VERSIONS"))
    proc = _doctor("--image", env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stdout.startswith("FAIL  flavor"), proc.stdout


def test_cuda_runtime_is_compared_with_the_image(monkeypatch):
    versions = {"flavor": "gpu", "python": {}, "system": {"cuda": "12.6.3"}}
    monkeypatch.setattr(doctor, "_cuda_runtime", lambda: "12.6")  # CuPy's runtime needs CUDA
    assert doctor.versions_check(True, versions, {}).status == "ok"
    monkeypatch.setattr(doctor, "_cuda_runtime", lambda: "12.4")
    failed = doctor.versions_check(True, versions, {})
    assert failed.status == "FAIL" and "CUDA runtime 12.4 (want 12.6.3)" in failed.reason
