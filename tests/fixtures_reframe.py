"""The ReFrame fixtures: ReFrame 4.10.4 in a venv of its own (pyproject's ``reframe`` pins,
installed with --no-deps as `make reframe-venv` does; made once in build/reframe-venv), and
``reframe()``, which runs it on a configuration with this checkout's checks."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import REPO

VENV = REPO / "build" / "reframe-venv"
CHECKS = REPO / "chainermn_rt" / "reframe" / "checks.py"


@pytest.fixture(scope="session")
def reframe_venv() -> Path:
    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["reframe"]
    marker = VENV / "pins.txt"
    if not marker.exists() or marker.read_text() != "\n".join(pins):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        proc = subprocess.run([str(VENV / "bin/pip"), "install", "-q", "--no-deps", *pins],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            pytest.fail(f"installing ReFrame: {proc.stderr[-1500:]}", pytrace=False)
        marker.write_text("\n".join(pins))
    return VENV


def reframe(venv: Path, config: Path, args: list[str], cwd: Path,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``reframe -C config -c checks ARGS`` in ``cwd``; the checks import this checkout's
    chainermn_rt."""
    env = {**(env or os.environ), "PYTHONPATH": str(REPO), "RFM_REPORT_FILE":
           str(cwd / "report.json"), "HOME": str(cwd)}
    return subprocess.run([str(venv / "bin/reframe"), "-C", str(config), "-c", str(CHECKS),
                           *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=1800)
