"""``site init`` and ``site check --live`` against the pyxis sandbox (sandbox-pyxis.toml's):
pyxis found in ``srun --help``, enroot's hooks where enroot itself reads them (the sandbox
binds its own configuration folder over the install's), a step of the written profile's
partition in a tiny SquashFS through pyxis, one node whose enroot cannot run (the site check
and the doctor); then a job of the written profile (its stubs filled in) in the cpu image's
SquashFS."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_jobs_pyxis import IMAGE_OS, submit

from chainermn_rt.sandbox import scratch
from chainermn_rt.site import load_site

from conftest import REPO, json_objects, require_commands
from fixtures_sandbox import user_folder

pytestmark = pytest.mark.slurm


def _chainermn_rt(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chainermn_rt", *args], env=env,
                          capture_output=True, text=True, timeout=600)


def _tiny_image(folder: Path) -> Path:
    """A SquashFS of dash as /bin/sh, cat and the libraries they load, and an os-release."""
    require_commands("mksquashfs")
    tree = folder / "tree"
    for path in ("/bin/dash", "/bin/cat", "/lib/x86_64-linux-gnu/libc.so.6",
                 "/lib64/ld-linux-x86-64.so.2"):
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(path).resolve(), target)
    (tree / "bin/sh").symlink_to("dash")
    for sub in ("proc", "sys", "dev", "tmp", "run", "root", "etc", "usr/bin"):
        (tree / sub).mkdir(parents=True, exist_ok=True)
    (tree / "etc/os-release").write_text("NAME=tiny\n")
    image = folder / "tiny.sqsh"
    subprocess.run(["mksquashfs", str(tree), str(image), "-noappend", "-quiet", "-all-root"],
                   check=True, capture_output=True)
    image.chmod(0o644)
    return image


def test_site_init_on_the_pyxis_sandbox_writes_a_profile_whose_steps_run(sandbox_pyxis,
                                                                         tmp_path):
    env = sandbox_pyxis.env()
    found = tmp_path / "found.toml"
    start = time.monotonic()
    proc = _chainermn_rt(env, "site", "init", "--partition", "cpu", "--output", str(found))
    print(f"site init on the pyxis sandbox: {time.monotonic() - start:.1f} s\n{proc.stdout}")
    assert proc.returncode == 0, proc.stderr
    assert [w for w in proc.stdout.splitlines() if "enroot" in w] == [], proc.stdout
    text = found.read_text()
    assert '# runtime = "pyxis"' in text and "found: pyxis" in text, text
    image = _tiny_image(tmp_path)
    profile = tmp_path / "pyxis.toml"  # the stub filled in, as its administrator would
    profile.write_text(text + f'\n[container]\nruntime = "pyxis"\nimage = "{image}"\n')
    start = time.monotonic()
    live = _chainermn_rt(env, "site", "check", str(profile), "--live")
    print(f"site check --live: {time.monotonic() - start:.1f} s")
    assert live.returncode == 0, live.stdout + live.stderr
    assert live.stdout.splitlines()[-1] == "live: matches the cluster", live.stdout
    # node2's enroot cannot make this user's data folder (enroot.conf's ENROOT_DATA_PATH, a
    # file in its way there): the site check and the doctor each say one line naming the node,
    # exit 3
    data = (scratch.node_folder(sandbox_pyxis.settings, "node2") / "enroot" / "data"
            / f"user-{os.getuid()}")
    aside = data.with_name(data.name + ".aside")
    # the healthy check's step may still be ending on node2 (its pyxis epilog): the live check
    # probes only nodes a step reaches, so node2 is idle first (a fresh-clone run once found
    # node2's broken enroot unseen: "live: matches the cluster")
    _resume_node2(sandbox_pyxis)
    states = sandbox_pyxis.slurm.run(["sinfo", "-h", "-N", "-o", "%N %T %E"]).stdout
    assert "node2 idle " in states + " ", states
    if data.exists():
        data.rename(aside)
    data.write_text("")
    try:
        broken = _chainermn_rt(env, "site", "check", str(profile), "--live")
        states = sandbox_pyxis.slurm.run(["sinfo", "-h", "-N", "-o", "%N %T %E"]).stdout
        _resume_node2(sandbox_pyxis)
        start = time.monotonic()
        doctor = _chainermn_rt(env, "doctor", "--site", str(profile), "--nodes", "2",
                               "--out", str(tmp_path / "doctor"), "--exclude-bad",
                               str(tmp_path / "bad.txt"))
        print(f"the doctor, node2's enroot broken: {time.monotonic() - start:.1f} s")
    finally:
        data.unlink()
        if aside.exists():
            aside.rename(data)
        _resume_node2(sandbox_pyxis)
    mkdir = "node2: enroot cannot run: enroot info failed: mkdir: "
    for proc, command in ((broken, "site"), (doctor, "doctor")):
        print(proc.stderr, end="")
        assert proc.returncode == 3, proc.stdout + proc.stderr + f"\nsinfo after: {states}"
        assert proc.stderr.startswith(f"chainermn-rt {command}: error: {mkdir}"), proc.stderr
        assert f"enroot/data/user-{os.getuid()}" in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr
    assert (tmp_path / "bad.txt").read_text() == "node2\n"
    # a drained node is not asked, and the check says so rather than only "matches"
    sandbox_pyxis.slurm.run(["scontrol", "update", "NodeName=node2", "State=DRAIN",
                             "Reason=test"])
    try:
        drained = _chainermn_rt(env, "site", "check", str(profile), "--live")
    finally:
        sandbox_pyxis.slurm.run(["scontrol", "update", "NodeName=node2", "State=RESUME"])
    assert drained.returncode == 0, drained.stdout + drained.stderr
    said = [line for line in drained.stdout.splitlines() if line.startswith("not checked")]
    assert len(said) == 1 and said[0].startswith("not checked: node node2: IDLE+DRAIN") \
        and said[0].endswith(": enroot not asked (no step reaches it)"), drained.stdout
    step = subprocess.run(
        ["srun", "--partition=cpu", "-N2", "--ntasks-per-node=1", "--mpi=pmix", "--time=2",
         f"--container-image={image}", "sh", "-c",
         'echo "$(cat /etc/os-release) rank $SLURM_PROCID of $SLURM_NTASKS"'],
        env=env, capture_output=True, text=True, timeout=300)
    assert step.returncode == 0, step.stderr
    assert sorted(step.stdout.splitlines()) == ["NAME=tiny rank 0 of 2",
                                                "NAME=tiny rank 1 of 2"], step.stdout


def _resume_node2(sb) -> None:
    """pyxis's job epilog (container_scope=job) meets node2's broken enroot after each step
    there, and Slurm drains node2 as it would a cluster's node: once its epilog is over,
    resumed as an admin would."""
    deadline = time.monotonic() + 120
    # "completing": its epilog runs; a trailing "*": not responding to slurmctld for a while
    while ("completing" in (state := sb.slurm.run(["sinfo", "-h", "-n", "node2", "-o", "%T"]
                                                  ).stdout) or "*" in state) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    if "drain" in state:
        sb.slurm.run(["scontrol", "update", "NodeName=node2", "State=RESUME"])


def _filled_in(text: str, image: Path) -> str:
    """The written profile with its stubs filled in as the sandbox's administrator would: the
    cpu image, /tmp in every container, Open MPI over the sandbox's bridge, jobs as root."""
    return text + f"""
[container]
runtime = "pyxis"
image = "{image}"
binds = ["/tmp:/tmp"]

[environment]
OMPI_MCA_pml = "ob1"
OMPI_MCA_btl = "self,vader,tcp"
OMPI_ALLOW_RUN_AS_ROOT = "1"
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = "1"
"""


def run_a_job(sb, image: Path, tmp_path: Path) -> None:
    """``site init``'s profile, filled in, submits report_mpi.py on 2 nodes in ``image``."""
    found = tmp_path / "found.toml"
    proc = _chainermn_rt(sb.env(), "site", "init", "--partition", "cpu", "--output", str(found))
    assert proc.returncode == 0, proc.stderr
    profile = user_folder(sb, "written") / "written.toml"
    profile.write_text(_filled_in(found.read_text(), image))
    tree = user_folder(sb, "programs")
    shutil.copy(REPO / "tests/programs/report_mpi.py", tree / "report_mpi.py")
    state, log = submit({"sb": sb, "profile": profile, "image": []}, "written",
                        ["python3", str(tree / "report_mpi.py")])
    assert state == "COMPLETED", log[-3000:]
    ranks = sorted(json_objects(log), key=lambda r: r["rank"])
    size = len(load_site(profile).partition("cpu").topology.slots) * 2  # as site init found
    assert [r["rank"] for r in ranks] == list(range(size)), ranks
    assert {r["size"] for r in ranks} == {size} and {r["os"] for r in ranks} == {IMAGE_OS}
    assert {r["host"] for r in ranks} == {"node1", "node2"}, ranks


@pytest.mark.docker  # the cpu image's SquashFS
def test_a_job_of_the_written_profile_runs_in_the_cpu_image(sandbox_pyxis, cpu_sqfs, tmp_path):
    run_a_job(sandbox_pyxis, cpu_sqfs, tmp_path)
