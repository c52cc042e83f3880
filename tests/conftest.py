"""Shared test helpers.

Real components (MPI, Slurm, Docker, Charliecloud) are never skipped: a test
that needs one fails with a message naming what is missing. Only GPU tests skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mpi4py
import pytest

from chainermn_rt.sandbox import mpi_crash

# MPI runs only in the ranks the tests start. Initialised in this process (importing
# mpi4py.MPI does that), a singleton MPI would set PMIx variables in the C environment,
# which every later mpirun inherits and fails on.
mpi4py.rc.initialize = False
mpi4py.rc.finalize = False

# session-scoped fixtures: `sandbox` (real Slurm); `engine`, `cpu_image`, `gpu_image` (Docker);
# `wheels` (the host venv of `chainermn-rt install`)
pytest_plugins = ["fixtures_sandbox", "fixtures_docker", "fixtures_install", "fixtures_reframe"]

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
IN_CI = os.environ.get("CI", "").lower() == "true"


def require_commands(*names: str) -> None:
    """Fail (never skip) when a command a real-component test needs is missing."""
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        pytest.fail(f"missing on this machine: {', '.join(missing)} (run `make setup`)",
                    pytrace=False)


def folder_contents(path: Path) -> dict[str, bytes | str | None]:
    """Everything below ``path``: a file's bytes, a link's target, None for a folder; equal
    before and after means nothing was written, changed or removed."""
    return {str(p.relative_to(path)): os.readlink(p) if p.is_symlink() else
            p.read_bytes() if p.is_file() else None for p in sorted(path.rglob("*"))}


def mpirun_argv(np: int) -> list[str]:
    """``mpirun -np N`` with the flags Open MPI needs here (root, 2 cores)."""
    require_commands("mpirun")
    argv = ["mpirun", "-np", str(np), "--oversubscribe"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    return argv


LAUNCHER_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "SLURM_", "OPAL_", "ORTE_", "PRTE_")


def clean_launcher_env(env: dict | None = None) -> dict:
    """``env`` (default os.environ) without an enclosing launcher's variables (pytest itself
    run under srun or mpirun), which would make the ranks a test starts join that job.
    Settings (``OMPI_MCA_*``, ``OMPI_ALLOW_RUN_AS_ROOT*``) stay."""
    base = dict(os.environ if env is None else env)
    return {k: v for k, v in base.items() if not k.startswith(LAUNCHER_PREFIXES)
            or k.startswith(("OMPI_MCA_", "OMPI_ALLOW_RUN_AS_ROOT"))}


def run_mpi(np: int, args: list[str], timeout: float = 300,
            **kwargs) -> subprocess.CompletedProcess:
    """Run ``mpirun -np N python ARGS`` for real and fail with its output when it fails
    (``check=False``: return it whatever its status)."""
    env = clean_launcher_env(kwargs.pop("env", None))
    check = kwargs.pop("check", True)
    proc = subprocess.run(mpirun_argv(np) + [PYTHON, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=kwargs.pop("cwd", REPO), env=env, **kwargs)
    if check and proc.returncode != 0:
        pytest.fail(f"mpirun -np {np} {' '.join(args)} exited {proc.returncode}\n"
                    f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}",
                    pytrace=False)
    return proc


def json_objects(text: str) -> list[dict]:
    """Every JSON object in ``text``, even where ranks' output lines interleaved mid-line."""
    decoder, found, i = json.JSONDecoder(), [], text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        found.append(obj)
        i = text.find("{", end)
    return found


# "1" (tests/gpu_check.py on a GPU machine): no usable GPU is an error, not a reason to skip
REQUIRE_GPU_VAR = "CHAINERMN_RT_REQUIRE_GPU"


def gpu_available() -> bool:
    try:
        import cupy
        import cupy.cuda.nccl  # noqa: F401 - ChainerMN's GPU communicators need it

        count = cupy.cuda.runtime.getDeviceCount()
        why = f"CuPy {cupy.__version__} sees no GPU"
    except Exception as err:  # noqa: BLE001 - any failure means no usable GPU
        count, why = 0, f"{type(err).__name__}: {err}"
    if count == 0 and os.environ.get(REQUIRE_GPU_VAR) == "1":
        raise pytest.UsageError(f"{REQUIRE_GPU_VAR}=1 but no usable GPU: {why}")
    return count > 0


def _rerun_on_mpi_init_segfault(error: BaseException | None) -> bool:
    return error is not None and mpi_crash.crashed_at_start(str(error))


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="no CUDA GPU with CuPy here")
    if any("gpu" in item.keywords for item in items) and not gpu_available():
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)
    # mpi_crash's policy for a test that starts ranks itself (mpirun, srun): failing with
    # Open MPI's start-up crash, it runs once more (pytest-rerunfailures; reported as RERUN).
    # A job's crash is Cluster.run's to retry: its JobFailed after the retry shows no marks.
    if config.pluginmanager.hasplugin("rerunfailures"):
        for item in items:
            if {"slurm", "mpi"} & set(item.keywords):
                item.add_marker(pytest.mark.flaky(reruns=mpi_crash.AGAIN,
                                                  condition=_rerun_on_mpi_init_segfault))
