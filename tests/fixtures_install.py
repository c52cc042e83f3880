"""Fixtures of the install tests: the host venv's wheels (as `make install-wheels` makes
them, once a session) and ``install()``, the command run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO


@pytest.fixture(scope="session")
def wheels(tmp_path_factory):
    out = tmp_path_factory.mktemp("install-wheels")
    subprocess.run([sys.executable, "-m", "bench.offline_wheels", "--host", sys.executable,
                    "--out", str(out)], cwd=REPO, check=True, capture_output=True, timeout=600)
    return out


def install(wheels: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``chainermn-rt install`` with these wheels and this Python."""
    return subprocess.run([sys.executable, "-m", "chainermn_rt", "install", "--wheels",
                           str(wheels), "--python", sys.executable, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)
