"""Fixtures of the install tests: the host venv's wheels (as `make install-wheels` makes
them, once a session), ``install()``, the command run as a user runs it, and the module
systems: Debian's Lmod (``LMOD_INIT``) and Environment Modules 5.2 (``modulecmd``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, require_commands

LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")
MODULES_CACHE = REPO / "build" / "environment-modules"


@pytest.fixture(scope="session")
def wheels(tmp_path_factory):
    out = tmp_path_factory.mktemp("install-wheels")
    subprocess.run([sys.executable, "-m", "containers.offline_wheels", "--host", sys.executable,
                    "--out", str(out)], cwd=REPO, check=True, capture_output=True, timeout=600)
    return out


def install(wheels: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``chainermn-rt install`` with these wheels and this Python."""
    return subprocess.run([sys.executable, "-m", "chainermn_rt", "install", "--wheels",
                           str(wheels), "--python", sys.executable, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="session")
def modulecmd():
    """Environment Modules 5.2's modulecmd.tcl from Debian's package, unpacked (once) in build/."""
    require_commands("tclsh", "apt-get", "dpkg")
    found = MODULES_CACHE / "usr/lib/x86_64-linux-gnu/modulecmd.tcl"
    if not found.exists():
        download = MODULES_CACHE.parent / "environment-modules-download"
        shutil.rmtree(download, ignore_errors=True)
        download.mkdir(parents=True)
        proc = subprocess.run(["apt-get", "download", "environment-modules"], cwd=download,
                              capture_output=True, text=True, timeout=300)
        debs = list(download.glob("environment-modules_*.deb"))
        if proc.returncode != 0 or not debs:
            pytest.fail(f"apt-get download environment-modules: {proc.stderr[-500:]}",
                        pytrace=False)
        subprocess.run(["dpkg", "-x", str(debs[0]), str(MODULES_CACHE)], check=True)
        shutil.rmtree(download)
    return found
