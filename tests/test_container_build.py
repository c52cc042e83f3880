"""containers/build.py: engine choice, the build command line, messages for missing tools."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO))

from containers import build  # noqa: E402
from containers.recipe import CA_BUNDLE, CA_SECRET  # noqa: E402


def test_an_unknown_engine_is_refused_with_the_allowed_ones():
    with pytest.raises(build.BuildError, match="ENGINE=rkt; allowed: docker, podman, buildah"):
        build.find_engine("rkt")


def test_a_requested_engine_that_is_missing_is_named(monkeypatch):
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(build.BuildError, match="ENGINE=podman but podman is not installed"):
        build.find_engine("podman")


def test_docker_build_line_uses_host_network_the_ca_secret_and_the_base():
    argv = build.build_argv("docker", "cpu", "chainermn-rt/base:bookworm")
    assert argv[:2] == [build.DOCKER, "build"]
    assert argv[argv.index("--network") + 1] == "host"
    assert argv[argv.index("-f") + 1] == str(REPO / "containers/cpu/Dockerfile")
    assert "BUILD_BASE=chainermn-rt/base:bookworm" in argv
    assert "RUNTIME_BASE=chainermn-rt/base:bookworm" in argv
    assert argv[-1] == str(REPO)  # the context the Dockerfile.dockerignore trims
    if build.HOST_CA.exists():
        assert f"id={CA_SECRET},src={build.HOST_CA}" in argv
    dockerfile = (REPO / "containers/cpu/Dockerfile").read_text()
    assert f"--mount=type=secret,id={CA_SECRET},target={CA_BUNDLE}" in dockerfile


def test_buildah_builds_without_pulling():
    argv = build.build_argv("buildah", "gpu", None)
    assert argv[:5] == ["buildah", "bud", "--isolation", "chroot", "--pull-never"]
    assert not any(a.startswith("BUILD_BASE=") for a in argv)


def test_sif_without_apptainer_or_singularity_says_what_to_do(tmp_path):
    proc = subprocess.run([sys.executable, "containers/build.py", "sif", "--flavor", "cpu"],
                          cwd=REPO, capture_output=True, text=True, check=False,
                          env={"PATH": str(tmp_path)})  # neither tool on this PATH
    assert proc.returncode == 2
    assert "neither apptainer nor singularity is installed" in proc.stderr
    assert "containers/cpu/chainermn-rt.def" in proc.stderr
    assert "Traceback" not in proc.stderr
