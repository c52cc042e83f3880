"""What the Plan writes for pyxis (chainermn_rt/runtimes/pyxis.py) and what it refuses, without
Slurm: the step's flags, the words the shell expands ($PWD, the job id), and bad images, binds,
flags and job folders, each one line naming the field (exit 2, nothing written)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.quoting import sh_join
from chainermn_rt.render import render
from chainermn_rt.site import load_site, resolve_site
from chainermn_rt.submission import check_reach

from conftest import PYTHON, REPO

DGX = REPO / "slurm" / "sites" / "dgx-h100.toml"  # pyxis, /lustre bound
STUB = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
"""


def _profile(tmp_path: Path, old: str, new: str) -> Path:
    text = DGX.read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "site.toml"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize("srun_mpi", ["pmix", "pmi2"])
def test_pmi2s_variables_of_each_task_win_over_the_containers(tmp_path, srun_mpi):
    """enroot's PMI hook writes the first task's PMI_* into the container's environment: under
    pmi2 the step names them in --container-env, so each task keeps its own."""
    site = _profile(tmp_path, 'srun_mpi = "pmix"', f'srun_mpi = "{srun_mpi}"')
    line = sh_join(make_plan(load_site(site), Request(nodes=2, command=("x",))).launch)
    exported = line.split("--container-env=")[1].split()[0].split(",")
    pmi = ["PMI_FD", "PMI_JOBID", "PMI_RANK", "PMI_SIZE"] if srun_mpi == "pmi2" else []
    assert [name for name in exported if name.startswith("PMI")] == pmi
    assert f" --mpi={srun_mpi} " in line


def test_the_step_mounts_the_jobs_folder_starts_there_and_keeps_the_jobs_variables():
    plan = make_plan(load_site(DGX), Request(nodes=1, stage=("/lustre/shards",), timeline=True,
                                             env=(("NCCL_DEBUG", "INFO"), ("PATH", "/h/bin")),
                                             command=("x",)))
    line = sh_join(plan.launch)
    # the profile's bind, the node-local scratch of --stage, then the job's folder
    assert (' --container-mounts=/lustre:/lustre,/raid:/raid,"${PWD}" '
            '--container-workdir="${PWD}" ') in line
    exported = line.split("--container-env=")[1].split()[0].split(",")
    # PATH stays the image's (its python3), as pyxis keeps it from enroot
    assert exported == [*(name for name, _ in plan.environment if name != "PATH"),
                        "CHAINERMN_RT_TIMELINE",
                        "CHAINERMN_RT_STAGE_DIR", "CHAINERMN_RT_STAGE_FROM",
                        "CHAINERMN_RT_STAGE_LIVE_JOBS", "CHAINERMN_RT_STOP_FILE"]
    assert "NCCL_DEBUG" in exported and line.endswith(" --no-container-mount-home")
    assert "--container-name" not in line  # a SquashFS file: unnamed (squashfuse mounts it)
    # the stage copy step runs in the same container, with the same flags
    assert sh_join(plan.stage.copy).startswith(
        "srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --kill-on-bad-exit=1 --mpi=none "
        + line.split(" ", 4)[4])


def test_a_registry_image_is_one_named_container_per_job(tmp_path):
    """Run with a stub srun: the shell expands the job's folder and its id."""
    plan = make_plan(load_site(DGX), Request(nodes=1, image="nvcr.io#nvidia/pytorch:24.01-py3",
                                             command=("x",)))
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "srun").write_text(STUB)
    (bin_ / "srun").chmod(0o755)
    (tmp_path / "job.sh").write_text(render(plan))
    for job in ("4242", None):
        env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}",
               "STUB_LOG": str(tmp_path / "calls")}
        env.pop("SLURM_JOB_ID", None)
        if job:
            env["SLURM_JOB_ID"] = job
        subprocess.run(["bash", "job.sh"], cwd=tmp_path, env=env, check=True, timeout=60)
    calls = [json.loads(line) for line in (tmp_path / "calls").read_text().splitlines()]
    first, second = calls
    assert f"--container-mounts=/lustre:/lustre,{tmp_path}" in first
    assert f"--container-workdir={tmp_path}" in first
    assert "--container-name=chainermn-rt-4242" in first
    # outside Slurm (a script tried by hand) the shell's process id stands for the job's
    assert [w for w in second if w.startswith("--container-name=chainermn-rt-")][0][-1].isdigit()


def test_the_profiles_mount_home_flag_replaces_the_default(tmp_path):
    path = _profile(tmp_path, 'binds = ["/lustre:/lustre"]',
                    'binds = ["/lustre:/lustre"]\nflags = ["--container-mount-home"]')
    line = sh_join(make_plan(load_site(path), Request(nodes=1, command=("x",))).launch)
    assert line.endswith(" --container-mount-home") and "--no-container-mount-home" not in line


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "chainermn_rt", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def _refused(tmp_path: Path, site: str | Path, *args: str) -> str:
    """render's one line (exit 2), and no script written."""
    proc = cli("render", "--site", str(site), "--nodes", "1", "--output", "job.sh", *args,
               "--", "true", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.splitlines()
    assert not (tmp_path / "job.sh").exists()
    return line.removeprefix("chainermn-rt render: error: ")


def test_images_pyxis_cannot_run_are_refused(tmp_path):
    sif = tmp_path / "x.sqsh"
    sif.write_bytes(b"#!/usr/bin/env run-singularity\n\x00".ljust(32, b"\x00") + b"SIF_MAGIC\x00")
    zeros = tmp_path / "zeros.sqsh"
    zeros.write_bytes(bytes(64))
    squash = tmp_path / "ok.sqsh"
    squash.write_bytes(b"hsqs" + bytes(60))
    (tmp_path / "folder").mkdir()
    (tmp_path / "here.sqsh").write_bytes(b"hsqs")
    cases = {
        "/images/x.sif": "--image: /images/x.sif is a SIF (Apptainer's image), which pyxis "
                         "cannot run; allowed: a SquashFS file (make sqfs), or a registry's image",
        str(sif): f"--image: {sif} is a SIF (Apptainer's image)",
        str(tmp_path / "folder"): f"--image: {tmp_path}/folder is a folder",
        "/images/rootfs/": "--image: /images/rootfs/ is a folder",
        str(zeros): f"--image: {zeros} is not a SquashFS file (no 'hsqs' at its start)",
        "here.sqsh": "--image: 'here.sqsh' is a file or folder here, which pyxis would take for "
                     "a registry's image; allowed: ./here.sqsh or its absolute path",
    }
    for image, start in cases.items():
        assert _refused(tmp_path, DGX, "--image", image).startswith(start), image
    for image in (str(squash), "./here.sqsh", "/nodes/only/x.sqsh", "nvcr.io#nvidia/x:1"):
        proc = cli("render", "--site", str(DGX), "--nodes", "1", "--image", image, "--", "true",
                   cwd=tmp_path)
        assert proc.returncode == 0, (image, proc.stderr)


@pytest.mark.parametrize("old, new, start", [
    ('binds = ["/lustre:/lustre"]', 'binds = ["/lustre:lustre"]',
     "container.binds[0]: '/lustre:lustre' is read by pyxis as SRC:DST[:FLAGS], split on ':'"),
    ('binds = ["/lustre:/lustre"]', 'binds = ["/lustre", "scratch:/scratch"]',
     "container.binds[1]: 'scratch:/scratch' is read by pyxis"),
    ('binds = ["/lustre:/lustre"]', 'binds = ["/lustre"]\nflags = ["--container-remap-root"]',
     "container.flags: --container-remap-root makes the ranks root inside the container"),
    ('binds = ["/lustre:/lustre"]', 'binds = ["/lustre"]\nflags = ["--container-workdir=/x"]',
     "container.flags: --container-workdir is written by chainermn-rt"),
    ('binds = ["/lustre:/lustre"]', 'binds = ["/lustre"]\nflags = ["--container-mounts", "/a"]',
     "container.flags: --container-mounts is written by chainermn-rt"),
])
def test_binds_and_flags_pyxis_would_misread_are_refused(tmp_path, old, new, start):
    assert _refused(tmp_path, _profile(tmp_path, old, new)).startswith(start)


def test_binds_pyxis_reads_as_written_are_kept(tmp_path):
    path = _profile(tmp_path, 'binds = ["/lustre:/lustre"]',
                    'binds = ["/lustre:/lustre:ro+rprivate", "./data", "tmpfs:/scratch"]')
    line = sh_join(make_plan(load_site(path), Request(nodes=1, command=("x",))).launch)
    assert '--container-mounts=/lustre:/lustre:ro+rprivate,./data,tmpfs:/scratch,"${PWD}"' in line


def test_mpirun_cannot_start_pyxis_ranks(tmp_path):
    assert _refused(tmp_path, DGX, "--launcher", "mpirun") == (
        "--launcher: mpirun cannot start pyxis containers; allowed: srun (or another --runtime)")


def test_a_job_folder_pyxis_would_split_is_refused_before_submitting(tmp_path):
    plan = make_plan(load_site(resolve_site("sandbox-pyxis")), Request(
        nodes=1, image="/nodes/x.sqsh", command=("true",)))
    for name in ("a,b", "a:b"):
        with pytest.raises(UserError) as err:
            check_reach(plan, tmp_path / name)
        assert str(err.value) == (
            f"the job's folder (where it was submitted): {tmp_path}/{name} holds ',' or ':', on "
            "which pyxis splits --container-mounts (the job's folder is mounted); allowed: a "
            "folder without them")
    check_reach(plan, tmp_path)
    bare = make_plan(load_site(resolve_site("sandbox")), Request(nodes=1, command=("true",)))
    check_reach(bare, tmp_path / "a,b")  # no container: any folder
