"""SIF files read without Apptainer (chainermn_rt/sif.py), and what the Plan and the doctor
refuse for Apptainer: a registry's reference, a file that is not a SIF, a SIF of another flavour.
The SIFs are real, made here by the Debian 13 root's Apptainer from an empty folder (1 s each).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from chainermn_rt import sif
from chainermn_rt.errors import UserError
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.runtimes import Container, runtime
from chainermn_rt.sandbox.root import run_in_root
from chainermn_rt.sif import check_image
from chainermn_rt.site import load_site
from containers import build as image_build

from conftest import PYTHON, REPO

SANDBOX = REPO / "slurm/sites/sandbox.toml"


@pytest.fixture(scope="module")
def sifs(debian13_root, tmp_path_factory) -> dict[str, Path]:
    """Tiny real SIFs labelled as the cpu and the gpu image, and one without our labels, built
    with `make sif`'s binds in a folder below /tmp (pytest's), as a CI clone's would be."""
    folder = tmp_path_factory.mktemp("sifs")
    assert str(folder).startswith("/tmp/")
    (folder / "empty").mkdir()
    made = {}
    for name, title in (("cpu", "chainermn-rt-cpu"), ("gpu", "chainermn-rt-gpu"),
                        ("other", "someone-elses")):
        (folder / f"{name}.def").write_text(
            f"Bootstrap: localimage\nFrom: {folder / 'empty'}\n\n%labels\n"
            f"    org.opencontainers.image.title {title}\n    io.chainermn-rt.test {name}\n")
        proc = run_in_root(debian13_root, ["apptainer", "build", str(folder / f"{name}.sif"),
                                           str(folder / f"{name}.def")],
                           binds=image_build.sif_binds(folder), capture_output=True,
                           text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        made[name] = folder / f"{name}.sif"
    return made


def test_labels_are_read_as_apptainer_inspect_reads_them(sifs, debian13_root):
    labels = sif.read_labels(sifs["gpu"])
    inspect = run_in_root(debian13_root, ["apptainer", "inspect", "--json", str(sifs["gpu"])],
                          binds=[sifs["gpu"].parent], capture_output=True, text=True, timeout=60)
    assert labels == json.loads(inspect.stdout)["data"]["attributes"]["labels"]
    assert labels["io.chainermn-rt.test"] == "gpu" and sif.flavor_of(labels) == "gpu"
    assert sif.flavor_of(sif.read_labels(sifs["other"])) is None
    assert sif.is_sif(sifs["cpu"]) and not sif.is_sif(SANDBOX)


def test_the_builds_tmp_is_writable_by_an_unprivileged_user(debian13_root, tmp_path):
    """apt-get in a ``.def``'s %post writes its temporary files in /tmp as the user _apt (uid
    42): with ``work/tmp`` made 0755 by root the gpu definition's second apt-get update failed
    ("Couldn't create temporary file /tmp/apt.conf...")."""
    binds = image_build.sif_binds(tmp_path)
    proc = run_in_root(debian13_root, ["setpriv", "--reuid=42", "--regid=42", "--clear-groups",
                                       "touch", "/tmp/written-by-apt"],
                       binds=binds, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "tmp" / "written-by-apt").stat().st_uid == 42
    assert image_build.sif_binds(tmp_path) == binds  # a second call finds the folder made


def test_damaged_sifs_are_not_sifs(sifs, tmp_path):
    data = sifs["cpu"].read_bytes()
    cases = {"no SIF magic at byte 32": b"#!/bin/sh\n" + bytes(200),
             "its header is cut short": data[:90],
             "its descriptor table lies outside the file": data[:4200],
             "descriptors in": data[:88] + (10 ** 6).to_bytes(8, "little") + data[96:]}
    for reason, content in cases.items():
        (tmp_path / "x.sif").write_bytes(content)
        with pytest.raises(sif.NotSif, match=reason):
            sif.read_labels(tmp_path / "x.sif")


@pytest.mark.parametrize("image", [
    "docker://debian:bookworm-slim", "chainermn-rt:0.1.0-cpu", "library://a/b/c:1",
    "docker-daemon:chainermn-rt:0.1.0-cpu", "ghcr.io/org/img@sha256:" + "a" * 64,
    "localhost:5000/img:latest", "oras://ghcr.io/org/img:1"])
def test_a_registry_reference_is_refused_for_apptainer(image):
    with pytest.raises(UserError) as err:
        make_plan(load_site(SANDBOX), Request(nodes=1, runtime="apptainer", image=image,
                                              partition="cpu", command=("x",)))
    assert str(err.value).startswith(f"--image: {image!r} is a registry's or an engine's image "
                                     "reference")
    assert "allowed: the path of a SIF file" in str(err.value)


@pytest.mark.parametrize("image", ["/shared/images/chainermn-rt-gpu.sif", "images/cpu.sif",
                                   "./with:colon.sif", "chainermn-rt-cpu.sif"])
def test_paths_not_on_this_machine_are_left_to_the_runtime(image):
    assert check_image(image, "--image", gpus=True) is None


def test_a_profile_naming_apptainer_with_a_docker_image_is_one_line_exit_2(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(SANDBOX.read_text().replace(
        '[container]\nruntime = "none"',
        '[container]\nruntime = "apptainer"\nimage = "docker://chainermn-rt:0.1.0-cpu"'))
    out = tmp_path / "job.sh"
    proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "render", "--site", str(site),
                           "--nodes", "1", "--partition", "cpu", "--output", str(out), "--", "x"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and not out.exists(), proc.stderr
    assert proc.stderr == ("chainermn-rt render: error: container.image: "
                           "'docker://chainermn-rt:0.1.0-cpu' is a registry's or an engine's image "
                           "reference, which apptainer would fetch on every node; allowed: the "
                           "path of a SIF file (make sif FLAVOR=...; ./NAME for a file whose name "
                           "has a ':')\n")


@pytest.mark.parametrize("flag", ["--cleanenv", "-e", "--containall", "--cleanenv=true"])
def test_flags_that_drop_the_ranks_environment_are_refused(flag, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(SANDBOX.read_text().replace(
        '[container]\nruntime = "none"',
        f'[container]\nruntime = "apptainer"\nimage = "/i/x.sif"\nflags = ["--writable-tmpfs", '
        f'"{flag}"]'))
    with pytest.raises(UserError, match=rf"^container.flags: {flag} keeps the job's environment "
                                        "from the ranks \\(their slot table, Slurm's and "
                                        "PMIx's variables\\); allowed: "):
        make_plan(load_site(site), Request(nodes=1, partition="cpu", command=("x",)))


def test_a_file_that_is_not_a_sif_is_refused_by_the_plan(tmp_path):
    image = tmp_path / "x.sif"
    image.write_text("not an image\n")
    with pytest.raises(UserError, match=rf"^--image: {image} is not a SIF file \(no SIF magic "
                                        r"at byte 32\); allowed: a SIF built by make sif$"):
        make_plan(load_site(SANDBOX), Request(nodes=1, runtime="singularity", image=str(image),
                                              partition="cpu", command=("x",)))


def test_the_cpu_sif_is_refused_for_ranks_with_gpus(sifs):
    dgx = load_site(REPO / "slurm" / "sites" / "dgx-h100.toml")
    with pytest.raises(UserError) as err:
        make_plan(dgx, Request(nodes=1, runtime="apptainer", image=str(sifs["cpu"]),
                               command=("x",)))
    assert str(err.value) == (f"--image: {sifs['cpu']} is the cpu image (its labels) and the "
                              "ranks of partition 'batch' use GPUs; allowed: a gpu flavour's SIF "
                              "(make sif FLAVOR=gpu), or a partition without GPUs")
    # the sandbox's GPUs are fake: the cpu SIF runs there; so do the gpu SIF anywhere and an
    # unlabelled one
    site = load_site(SANDBOX)
    for image, partition in ((sifs["cpu"], "gpu"), (sifs["cpu"], "cpu"), (sifs["gpu"], "gpu"),
                             (sifs["gpu"], "cpu"), (sifs["other"], "gpu")):
        plan = make_plan(site, Request(nodes=1, runtime="apptainer", image=str(image),
                                       partition=partition, command=("x",)))
        assert plan.container[-1] == str(image)


def _doctor(*args, roots: Path):
    """``chainermn-rt doctor`` with an empty root cache of its own: a root built or looked for
    there shows that something started."""
    return subprocess.run([PYTHON, "-m", "chainermn_rt", "doctor", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO,
                          env=dict(os.environ, CHAINERMN_RT_ROOTS=str(roots)))


@pytest.mark.parametrize("case", ["not-a-sif", "registry", "missing", "other-flavour",
                                  "unlabelled"])
def test_doctor_refuses_a_bad_image_in_one_line_and_starts_nothing(case, sifs, tmp_path):
    roots = tmp_path / "roots"
    roots.mkdir()
    args, message = {
        "not-a-sif": (["--image", str(SANDBOX)], f"--image: {SANDBOX} is not a SIF file (no SIF "
                                                 "magic at byte 32)"),
        "registry": (["--image", "docker://debian"], "--image: 'docker://debian' is a "
                                                     "registry's or an engine's image reference"),
        "missing": (["--image", str(tmp_path / "none.sif")], f"--image: {tmp_path}/none.sif is "
                                                             "not a file"),
        "other-flavour": (["--image", str(sifs["cpu"]), "--flavor", "gpu"],
                          f"--flavor: {sifs['cpu']} is the cpu image (its labels); allowed: the "
                          "gpu flavour's SIF (make sif FLAVOR=gpu), or --flavor cpu"),
        "unlabelled": (["--image", str(sifs["other"]), "--flavor", "cpu"],
                       f"--flavor: {sifs['other']} is not labelled as a chainermn-rt image"),
    }[case]
    proc = _doctor(*args, roots=roots)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.startswith(f"chainermn-rt doctor: error: {message}"), proc.stderr
    assert proc.stderr.count("\n") == 1
    assert list(roots.iterdir()) == []  # Apptainer's root not even looked for


def test_flavor_without_a_sif_is_refused(tmp_path):
    proc = _doctor("--flavor", "cpu", roots=tmp_path)
    assert proc.returncode == 2
    assert "--flavor: checks a SIF's labels; allowed: with --image X.sif" in proc.stderr


def test_the_container_argv_is_unchanged_for_apptainer():
    """--nv on every partition: Apptainer 1.4.5 says nothing about it on a host without a GPU
    (tests/test_container_sif.py runs it), and it brings the driver in on a GPU node."""
    argv, flags = runtime("apptainer").step(Container("apptainer", binds=("/data:/data:ro",)),
                                            "/i/x.sif")
    assert argv == ("apptainer", "exec", "--nv", "--bind", "/data:/data:ro", "/i/x.sif")
    assert flags == ()
