"""``chainermn-rt doctor``: real checks here; a fake ucx_info only for what needs a GPU and IB."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from chainermn_rt.doctor import stack
from chainermn_rt.doctor.check import Check, format_line
from containers.versions import python_pins

from conftest import PYTHON, REPO, require_commands

# what the doctor reports in a cpu image and on this (cpu) machine
CPU_CHECKS = {"flavor": "PASS", "mpi": "PASS", "mpi-cuda": "n/a", "ucx": "n/a", "pmix": "PASS",
              "nccl": "n/a", "cupy": "n/a", "cudnn": "n/a", "mpi4py": "PASS", "imports": "PASS",
              "jpeg": "PASS", "png": "PASS", "versions": "PASS"}


def _doctor(*args, env=None):
    return subprocess.run([PYTHON, "-m", "chainermn_rt", "doctor", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=env, check=False)


def test_doctor_on_this_machine_passes_the_cpu_checks():
    require_commands("ompi_info", "mpirun")
    proc = _doctor("--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = {c["name"]: c["status"] for c in json.loads(proc.stdout)}
    assert status == CPU_CHECKS


def test_image_mode_outside_an_image_fails_with_the_reason(tmp_path):
    proc = _doctor("--image", env=dict(os.environ, CHAINERMN_RT_VERSIONS=str(tmp_path / "none")))
    assert proc.returncode == 1
    assert any(line.startswith("FAIL  flavor") and "not a chainermn-rt image" in line
               for line in proc.stdout.splitlines()), proc.stdout


def test_cuda_flag_is_read_from_ompi_info():
    key = "mca:mpi:base:param:mpi_built_with_cuda_support:value"
    assert stack.cuda_mpi_check("gpu", {key: "true"}).status == "PASS"
    failed = stack.cuda_mpi_check("gpu", {key: "false"})
    assert failed.status == "FAIL" and "not CUDA-aware" in failed.reason
    assert stack.cuda_mpi_check("cpu", {key: "false"}).status == "n/a"


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
    ok = stack.ucx_check("gpu")
    assert ok.status == "PASS" and "cuda_copy" in ok.reason and "rc_verbs" in ok.reason
    fake_ucx_info("#      Transport: tcp\n#      Transport: posix\n")
    assert stack.ucx_check("gpu").status == "FAIL"


def test_ucx_without_an_hca_accepts_a_build_with_ib(fake_ucx_info):
    fake_ucx_info("#      Transport: cuda_copy\n#      Transport: tcp\n",
                  build='#define uct_MODULES ":cma:ib:rdmacm"')
    assert stack.ucx_check("gpu").reason.endswith("ib: ib (built; no HCA here)")
    assert stack.ucx_check("cpu").status == "n/a"


def test_ucx_without_a_gpu_driver_accepts_a_build_with_cuda(fake_ucx_info):
    fake_ucx_info("#      Transport: tcp\n#      Transport: rc_verbs\n",
                  build='#define uct_MODULES ":cuda:ib:rdmacm:cma"')
    ok = stack.ucx_check("gpu")
    assert ok.status == "PASS" and "cuda (built; no GPU driver here)" in ok.reason
    fake_ucx_info("#      Transport: tcp\n#      Transport: rc_verbs\n",
                  build='#define uct_MODULES ":ib:rdmacm:cma"')
    assert stack.ucx_check("gpu").status == "FAIL"
    assert stack.ucx_check("gpu-upstream").status == "FAIL"


FAKE_LIBS = {  # soname: C source of a library that answers like the real one
    "libnccl.so.2": "int ncclGetVersion(int *v) { *v = 23203; return 0; }",
    "libcudnn.so.8": "unsigned long cudnnGetVersion(void) { return 8907; }",
    # cuDNN 9's: a shim that forwards to libcudnn_graph.so.9 and aborts when that is missing
    "libcudnn.so.9": "#include <dlfcn.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
                     "unsigned long cudnnGetVersion(void) {\n"
                     "  void *graph = dlopen(\"libcudnn_graph.so.9\", RTLD_NOW);\n"
                     "  if (!graph) { fputs(\"Invalid handle. Cannot load symbol "
                     "cudnnGetVersion\\n\", stderr); abort(); }\n"
                     "  return ((unsigned long (*)(void)) dlsym(graph, \"cudnnGetVersion\"))();\n"
                     "}",
    "libcudnn_graph.so.9": "unsigned long cudnnGetVersion(void) { return 91000; }",
}


def _fake_lib(folder: Path, soname: str) -> None:
    require_commands("gcc")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "x.c").write_text(FAKE_LIBS[soname] + "\n")
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-Wl,-rpath,$ORIGIN",
                    "-o", str(folder / soname), str(folder / "x.c"), "-ldl"], check=True)


@pytest.fixture
def fake_libs(tmp_path):
    """A folder holding fake NCCL and cuDNN 8 libraries (no GPU library is installed here)."""
    for soname in ("libnccl.so.2", "libcudnn.so.8"):
        _fake_lib(tmp_path, soname)
    return tmp_path


def _checks_with(lib_dir, versions: dict | None, pythonpath: str = "") -> dict[str, stack.Check]:
    """nccl and cudnn checks in a process whose dynamic linker searches ``lib_dir``."""
    code = ("import json, sys; from chainermn_rt.doctor import stack; "
            "v = json.loads(sys.argv[1]); "
            "print(json.dumps(stack.as_json([stack.nccl_check('gpu', v), "
            "stack.cudnn_check('gpu', v)])))")
    out = subprocess.run([PYTHON, "-c", code, json.dumps(versions)], capture_output=True,
                         text=True, check=True, cwd=REPO,
                         env=dict(os.environ, LD_LIBRARY_PATH=str(lib_dir),
                                  PYTHONPATH=pythonpath)).stdout
    return {c["name"]: Check(**{**c, "nodes": tuple(c["nodes"])}) for c in json.loads(out)}


def _fake_cupy(site: Path, version: str) -> None:
    (site / "cupy").mkdir(parents=True, exist_ok=True)
    (site / "cupy" / "__init__.py").write_text(f"__version__ = {version!r}\n")


def test_outside_an_image_nccl_and_cudnn_are_read_from_nvidias_wheels(tmp_path):
    """The GPU machine of tests/gpu_check.py: NCCL and cuDNN 9 in site-packages/nvidia/*/lib,
    CuPy 14 (no cuDNN binding), no pins: versions are what is there."""
    site = tmp_path / "site"
    _fake_lib(site / "nvidia" / "nccl" / "lib", "libnccl.so.2")
    _fake_cupy(site, "14.2.0")
    empty = tmp_path / "empty"
    empty.mkdir()
    checks = _checks_with(empty, None, str(site))
    assert checks["nccl"] == Check(
        "nccl", "PASS", f"NCCL 2.32.3 (read from {site}/nvidia/nccl/lib/libnccl.so.2)")
    assert checks["cudnn"] == Check(
        "cudnn", "n/a", "CuPy 14 has no cuDNN binding: Chainer convolves without cuDNN")
    _fake_lib(site / "nvidia" / "cudnn" / "lib", "libcudnn.so.9")
    cudnn = _checks_with(empty, None, str(site))["cudnn"]  # calling the shim would abort
    assert cudnn.status == "n/a" and cudnn.reason.startswith(
        "CuPy 14 has no cuDNN binding: Chainer convolves without cuDNN; ")
    assert f"{site}/nvidia/cudnn/lib/libcudnn_graph.so.9: cannot open" in cudnn.reason
    _fake_lib(site / "nvidia" / "cudnn" / "lib", "libcudnn_graph.so.9")
    cudnn = _checks_with(empty, None, str(site))["cudnn"]
    assert cudnn == Check("cudnn", "PASS", f"cuDNN 9.10.0 (read from {site}/nvidia/cudnn/"
                                 "lib/libcudnn.so.9); CuPy 14 has no cuDNN binding: Chainer "
                                 "convolves without cuDNN")
    _fake_cupy(site, "13.6.0")  # CuPy 13 binds cuDNN 8, which is missing
    cudnn = _checks_with(empty, None, str(site))["cudnn"]
    assert cudnn.status == "FAIL" and "libcudnn.so.8 does not load" in cudnn.reason


def test_nccl_and_cudnn_versions_are_read_from_the_libraries(fake_libs):
    pins = {"python": {"nvidia-nccl-cu12": "2.32.3", "nvidia-cudnn-cu12": "8.9.7.29"}}
    checks = _checks_with(fake_libs, pins)
    assert checks["nccl"] == Check("nccl", "PASS", "NCCL 2.32.3 (read from libnccl.so.2)")
    assert checks["cudnn"] == Check("cudnn", "PASS", "cuDNN 8.9.7 (read from libcudnn.so.8)")
    wrong = _checks_with(fake_libs, {"python": {"nvidia-nccl-cu12": "2.30.1",
                                                "nvidia-cudnn-cu12": "8.9.2.26"}})
    assert wrong["nccl"].status == "FAIL" and "2.32.3 (want 2.30.1)" in wrong["nccl"].reason
    assert wrong["cudnn"].status == "FAIL" and "8.9.7 (want 8.9.2.26)" in wrong["cudnn"].reason


def test_a_missing_gpu_library_fails_and_the_cpu_flavour_has_none():
    missing = stack._library_check("nccl", "gpu", "libnccl-absent.so.2", "ncclGetVersion",
                                    stack._nccl_decode, None)
    assert missing.status == "FAIL" and "libnccl-absent.so.2 does not load" in missing.reason
    for check in (stack.nccl_check, stack.cudnn_check):
        assert check("cpu").status == "n/a"


def test_cupy_is_required_in_the_gpu_flavours():
    try:
        import cupy  # noqa: F401
    except ImportError:
        failed = stack.cupy_check("gpu")
        assert failed.status == "FAIL" and "import cupy" in failed.reason
    assert stack.cupy_check("cpu").status == "n/a"


def test_pmix_is_external_and_of_the_images_version():
    require_commands("ompi_info")
    _, params = stack.ompi_params()  # Debian's Open MPI here uses Debian's PMIx (ext3x)
    ok = stack.pmix_check(params, {"system": {"pmix": "4.2.2"}})
    assert ok.status == "PASS" and ok.reason == "PMIx 4.2.2, Open MPI component ext3x"
    wrong = stack.pmix_check(params, {"system": {"pmix": "9.9.9"}})
    assert wrong.status == "FAIL" and "PMIx 4.2.2 (want 9.9.9)" in wrong.reason
    internal = {k: v for k, v in params.items() if not k.startswith("mca:pmix:ext")}
    failed = stack.pmix_check(internal, None)
    assert failed.status == "FAIL" and "no external PMIx" in failed.reason


def test_a_wrong_version_fails():
    versions = {"flavor": "cpu", "python": {"numpy": "0.0.1"}, "system": {"openmpi": "4.1.4"}}
    check = stack.versions_check(True, versions, {"ompi:version:full": "4.1.4"})
    assert check.status == "FAIL" and "numpy" in check.reason and "(want 0.0.1)" in check.reason


def test_lines_are_aligned():
    line = format_line(Check("mpi4py", "n/a", "why"))
    assert line == "n/a   mpi4py         why"


def test_an_unreadable_versions_file_fails_the_flavor_check(tmp_path):
    (tmp_path / "VERSIONS").mkdir()  # reading it raises IsADirectoryError
    env = dict(os.environ, CHAINERMN_RT_VERSIONS=str(tmp_path / "VERSIONS"))
    proc = _doctor("--image", env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stdout.startswith("FAIL  flavor"), proc.stdout


def test_cuda_runtime_is_compared_with_the_image(monkeypatch):
    versions = {"flavor": "gpu", "python": {}, "system": {"cuda": "12.6.3"}}
    monkeypatch.setattr(stack, "_cuda_runtime", lambda: "12.6")  # CuPy's runtime needs CUDA
    assert stack.versions_check(True, versions, {}).status == "PASS"
    monkeypatch.setattr(stack, "_cuda_runtime", lambda: "12.4")
    failed = stack.versions_check(True, versions, {})
    assert failed.status == "FAIL" and "CUDA runtime 12.4 (want 12.6.3)" in failed.reason


def test_ucx_version_is_read_in_both_formats(fake_ucx_info, monkeypatch):
    monkeypatch.setattr(stack, "_expected_python", dict)  # only the system versions here
    versions = {"flavor": "gpu", "python": {}, "system": {"ucx": "1.13.1"}}
    for text in ("# Version 1.13.1\n# Git branch '<unknown>'", "# Library version: 1.13.1"):
        fake_ucx_info(text)
        assert stack.versions_check(True, versions, {}).status == "PASS", text
    fake_ucx_info("# Version 1.18.1")
    failed = stack.versions_check(True, versions, {})
    assert failed.status == "FAIL" and "ucx 1.18.1 (want 1.13.1)" in failed.reason


def test_the_jpeg_decoder_is_checked_against_the_images_libjpeg_turbo():
    """Here as in the images: Debian 12's libjpeg62-turbo, the version VERSIONS lists."""
    system = tomllib.loads((REPO / "containers/cpu/VERSIONS").read_text())["system"]
    ok = stack.jpeg_check({"system": system})
    assert ok.status == "PASS", ok
    assert ok.reason.startswith(f"libjpeg-turbo {system['libjpeg-turbo']} (/")
    assert "/libjpeg.so.62" in ok.reason  # the extension's library, not Pillow's own copy
    wrong = stack.jpeg_check({"system": {"libjpeg-turbo": "9.9.9"}})
    assert wrong.status == "FAIL" and f"{system['libjpeg-turbo']} (want 9.9.9)" in wrong.reason
    assert stack.png_check() == Check(
        "png", "PASS", f"Pillow {python_pins()['pillow']}: a 64x64 PNG decoded exactly")


@pytest.mark.parametrize(("missing", "failed"), [
    ("chainermn_rt.data._jpeg", {"jpeg": "import chainermn_rt.data.jpeg: import of "
                                         "chainermn_rt.data._jpeg halted"}),
    ("PIL.PngImagePlugin", {"png": "Pillow, a 64x64 PNG: KeyError: 'PNG'"}),
    ("PIL", {"jpeg": "Pillow, making the test JPEG: ModuleNotFoundError",
             "png": "Pillow, a 64x64 PNG: ModuleNotFoundError"}),
], ids=["no-extension", "no-png-plugin", "no-pillow"])
def test_the_image_checks_fail_with_what_is_missing(missing, failed):
    """A module that cannot be imported (None in sys.modules): each check names what failed."""
    code = (f"import json, sys; sys.modules[{missing!r}] = None; "
            "from chainermn_rt.doctor import stack; "
            "print(json.dumps(stack.as_json([stack.jpeg_check(), stack.png_check()])))")
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout
    checks = {c["name"]: c for c in json.loads(out)}
    assert {n for n, c in checks.items() if c["status"] == "FAIL"} == set(failed), checks
    for name, start in failed.items():
        assert checks[name]["reason"].startswith(start), checks[name]
