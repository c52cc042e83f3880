"""containers/build.py: engine choice, the build command line, messages for missing tools."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from containers import build
from containers.recipe import CA_BUNDLE, CA_SECRET

from conftest import REPO


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


def test_sif_without_any_apptainer_says_what_to_do(tmp_path):
    """No apptainer or singularity on PATH, and a Debian 13 root that cannot be built (its
    mirror does not answer): one line naming both and what to do, nothing written."""
    proc = subprocess.run(
        [sys.executable, "-m", "containers.build", "sif", "--flavor", "cpu"], cwd=REPO,
        capture_output=True, text=True, check=False, timeout=300,
        env={"PATH": str(tmp_path), "HOME": str(tmp_path),  # neither tool on this PATH
             "CHAINERMN_RT_ROOTS": str(tmp_path / "roots"),
             "CHAINERMN_RT_DEBIAN_MIRROR": "http://127.0.0.1:9/debian"})  # nothing listens
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("containers/build.py sif: neither apptainer nor singularity is "
                                  "on PATH, and the Debian 13 root that carries Apptainer is not "
                                  "usable: the Debian 13 root cannot be built: "), proc.stderr
    assert "http://127.0.0.1:9/debian cannot be reached" in proc.stderr
    assert "containers/cpu/chainermn-rt.def" in proc.stderr
    assert not list((tmp_path / "roots").glob("debian13-*"))  # no root


class _FakeEngine:
    """Answers ``docker image inspect`` / ``docker pull`` like an engine with ``images``."""

    docker = "docker"

    def __init__(self, images=(), registry=False):
        self.images, self.registry, self.calls = set(images), registry, []

    def env(self):
        return {}

    def run(self, argv, **kw):
        self.calls.append(argv[1:])
        name = argv[-1]
        if argv[1] == "pull" and self.registry:
            self.images.add(name)
        ok = name in self.images
        return subprocess.CompletedProcess(argv, 0 if ok else 1, "", "")


def _resolve(monkeypatch, engine, flavor="cpu"):
    made = []
    monkeypatch.setattr(build.subprocess, "run", engine.run)
    monkeypatch.setattr(build, "make_base", lambda image, suite, eng: made.append(image))
    return build.resolve_base(flavor, engine), made


def test_without_a_registry_the_debootstrap_base_is_made_then_reused(monkeypatch):
    local = build.load()["debian"]["local_base"]
    base, made = _resolve(monkeypatch, _FakeEngine())
    assert base == local and made == [local]
    base, made = _resolve(monkeypatch, _FakeEngine(images=[local]))
    assert base == local and made == []  # reused, not made again


def test_with_a_registry_the_official_base_is_kept(monkeypatch):
    official = build.load()["debian"]["base"]
    engine = _FakeEngine(registry=True)
    base, made = _resolve(monkeypatch, engine, "gpu")
    assert base is None and made == []  # the recipe's own ARG default: debian:bookworm-slim
    assert ["pull", "-q", official] in engine.calls
    assert f"ARG BUILD_BASE={official}" in (REPO / "containers/gpu/Dockerfile").read_text()


def test_the_registry_flavour_never_gets_the_debian_base(monkeypatch):
    engine = _FakeEngine()
    assert _resolve(monkeypatch, engine, "gpu-upstream") == (None, [])
    assert engine.calls == []


def test_an_unknown_flavour_is_one_line_with_exit_2():
    proc = subprocess.run([sys.executable, "-m", "containers.build", "image", "--flavor", "tpu"],
                          cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--flavor: invalid choice: 'tpu'" in proc.stderr


def _make_plan(folder, *args, id_file_age=None):
    """``make -n sif FLAVOR=cpu ARGS`` with the Makefile run in ``folder``, which holds only
    what the image's id file depends on (the recipe and pyproject.toml, an hour old) and,
    with ``id_file_age`` (seconds), the id file of that age: the commands make would run."""
    (folder / "containers" / "cpu").mkdir(parents=True, exist_ok=True)
    now = time.time()
    for name in ("pyproject.toml", "containers/cpu/Dockerfile"):
        (folder / name).touch()
        os.utime(folder / name, (now - 3600, now - 3600))
    mark = folder / "build" / "images" / "chainermn-rt-cpu.image-id"
    if id_file_age is not None:
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text("chainermn-rt:0-cpu sha256:0\n")
        os.utime(mark, (now - id_file_age, now - id_file_age))
    proc = subprocess.run(["make", "--no-print-directory", "-n", "-f", str(REPO / "Makefile"),
                           "-C", str(folder), "sif", "FLAVOR=cpu", *args],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if "containers.build" in line]


def test_make_sif_builds_the_image_first_only_when_it_is_missing(tmp_path):
    """The image's id file, written by every image build, is make's mark of the image."""
    build_image = "containers.build image --flavor cpu"
    build_sif = "containers.build sif --flavor cpu"
    plan = _make_plan(tmp_path)
    assert len(plan) == 2 and build_image in plan[0] and build_sif in plan[1], plan
    plan = _make_plan(tmp_path, id_file_age=60)  # built after its recipe: left alone
    assert len(plan) == 1 and build_sif in plan[0], plan
    plan = _make_plan(tmp_path, id_file_age=7200)  # built before its recipe changed
    assert len(plan) == 2 and build_image in plan[0], plan


def test_make_sif_from_the_definition_needs_no_image(tmp_path):
    plan = _make_plan(tmp_path, "FROM_DEF=1")
    assert len(plan) == 1 and plan[0].endswith("containers.build sif --flavor cpu "
                                               "--from-definition"), plan


def test_an_image_build_writes_the_id_file(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "OUT", tmp_path)
    monkeypatch.setattr(build.shutil, "which", lambda name: f"/usr/bin/{name}")
    ran = []

    def run(argv, **kw):
        ran.append(argv)
        out = "sha256:1234\n" if argv[1:3] == ["image", "inspect"] else ""
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr(build.subprocess, "run", run)
    build.image("cpu", "podman", None)
    assert ran[-1] == ["podman", "image", "inspect", "--format", "{{.Id}}", build.tag("cpu")]
    assert build.id_file("cpu") == tmp_path / "chainermn-rt-cpu.image-id"
    assert build.id_file("cpu").read_text() == f"{build.tag('cpu')} sha256:1234\n"


def test_an_id_file_whose_image_is_gone_is_removed_and_said(monkeypatch, tmp_path):
    """The image was removed after its build: make sif stops in one line, and the next one
    builds it (the id file is gone)."""
    monkeypatch.setattr(build, "OUT", tmp_path)
    monkeypatch.setattr(build, "_existing_docker", lambda: True)
    monkeypatch.setattr(build.subprocess, "run",
                        lambda argv, **kw: subprocess.CompletedProcess(argv, 1, "", ""))
    build.id_file("cpu").write_text("chainermn-rt:0-cpu sha256:0\n")
    with pytest.raises(build.BuildError) as err:
        build._save("cpu", tmp_path / "image.tar")
    assert str(err.value) == (
        f"image {build.tag('cpu')} is not built (removed {build.id_file('cpu')}, which said it "
        "was): `make sif FLAVOR=cpu` builds it first (or `make sif FROM_DEF=1` builds from the "
        "definition)")
    assert not build.id_file("cpu").exists()
