"""The job path through pyxis and enroot: ``chainermn-rt submit --site sandbox-pyxis --nodes 2
--wait`` as the sandbox's unprivileged user, on the Debian 12 stack whose slurmd loads pyxis
0.24.0 and whose nodes run enroot 4.1.2 (both built by ``make setup``), the ranks in the cpu
image's SquashFS (``make sqfs``): 2 nodes x 2 ranks through ``srun --mpi=pmix`` and
``--container-image``. Seconds are printed (``pytest -s``), not checked."""

from __future__ import annotations

import pwd
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from chainermn_rt.sandbox import Sandbox, scratch
from chainermn_rt.sandbox.root import load_pins
from chainermn_rt.sandbox.settings import HOST_USER, STATE_VAR
from chainermn_rt.site import resolve_site

from conftest import PYTHON, json_objects
from fixtures_sandbox import user_folder, user_tree

pytestmark = [pytest.mark.slurm, pytest.mark.docker]  # docker: the SquashFS of the cpu image
SITE = "sandbox-pyxis"
IMAGE_OS = "Debian GNU/Linux 12 (bookworm)"
IMAGE_PYTHON = "/opt/chainermn_rt/venv/bin/python3"  # the image's venv, not the host's
DIGEST = re.compile(r"^rank (\d) parameters sha256 (\w+)$", re.MULTILINE)


def jobs_as_user(sb: Sandbox, site: str, user: str, image: Path) -> dict:
    """A pyxis profile as an unprivileged user (``[sbatch] uid/gid``), copies of examples/ and
    tests/programs/ it may read (below /tmp: the containers see them), and the arguments that
    name a copy of the suite's SquashFS the user may read (the checkout may be private)."""
    tree = user_tree(sb)
    profile = user_folder(sb, "profile") / "as-user.toml"
    profile.write_text(resolve_site(site).read_text()
                       + f'\n[sbatch]\nuid = "{user}"\ngid = "{user}"\n')
    shared = user_folder(sb, "images") / image.name
    if not shared.exists():
        shutil.copyfile(image, shared)
        shared.chmod(0o644)
    return {"sb": sb, "tree": tree, "profile": profile, "image": ["--image", str(shared)]}


@pytest.fixture(scope="module")
def as_user(sandbox_pyxis, cpu_sqfs) -> dict:
    """sandbox-pyxis as the host's unprivileged user."""
    try:
        pwd.getpwnam(HOST_USER)
    except KeyError:
        pytest.fail(f"no user {HOST_USER} on this machine (run `make setup`)", pytrace=False)
    return jobs_as_user(sandbox_pyxis, SITE, HOST_USER, cpu_sqfs)


def submit(ctx: dict, name: str, command: list[str]) -> tuple[str, str]:
    """``chainermn-rt submit --site PROFILE --nodes 2 --wait -- COMMAND`` from a new folder the
    user may write; (final state, the job's log)."""
    cwd = user_folder(ctx["sb"], f"{name}-{secrets.token_hex(3)}")
    started = time.monotonic()
    proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "submit", "--site", str(ctx["profile"]),
                           "--nodes", "2", "--time", "5", "--job-name", name, *ctx["image"],
                           "--wait", "--wait-timeout", "600", "--", *command],
                          cwd=cwd, env={**ctx["sb"].env(), STATE_VAR: str(ctx["sb"].state_dir)},
                          capture_output=True, text=True, timeout=900)
    job = re.match(r"submitted job (\d+)", proc.stdout)
    assert job, proc.stdout + proc.stderr
    log = cwd / f"{name}-{job.group(1)}.out"
    text = log.read_text(errors="replace") if log.exists() else ""
    ended = re.search(rf"job {job.group(1)}: (\w+), exit code", proc.stdout)
    assert ended, proc.stdout + proc.stderr + text[-3000:]
    print(f"\nMEASURED {name}: job {job.group(1)} {ended.group(1)} "
          f"{time.monotonic() - started:.1f} s from submit to its end")
    return ended.group(1), text


def test_ranks_in_the_image_through_pyxis_then_mnist(as_user):
    """4 ranks in the image's SquashFS, as the user, report the image's OS, Python and Open
    MPI and one world of 4 over 2 nodes, started by Slurm 22.05's PMIx server (the PMIx
    variables reached them: enroot's PMI hook); then MNIST trains with one digest on every
    rank. The nodes' pyxis starts each container on the image mounted by squashfuse."""
    program = str(as_user["tree"] / "tests" / "programs" / "report_mpi.py")
    state, log = submit(as_user, "report", ["python3", program])
    assert state == "COMPLETED", log[-3000:]
    ranks = sorted(json_objects(log), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3] and {r["size"] for r in ranks} == {4}
    assert sorted(r["host"] for r in ranks) == ["node1", "node1", "node2", "node2"]
    uid = pwd.getpwnam(HOST_USER).pw_uid
    seen = {(r["os"], r["python"], r["mpi"], r["uid"]) for r in ranks}
    assert seen == {(IMAGE_OS, IMAGE_PYTHON, "Open MPI v4.1.4", uid)}, seen
    assert {r["pmix_server"].split(".")[0] for r in ranks} == {"4"}, ranks
    assert [line for line in log.splitlines() if not line.startswith("{")] == [], log
    out = as_user["tree"].parent / f"mnist-result-{secrets.token_hex(3)}"
    state, log = submit(as_user, "mnist", [
        "python3", str(as_user["tree"] / "examples" / "train_mnist.py"), "--n-train", "4000",
        "--n-test", "400", "--unit", "100", "--batchsize", "50", "--log-every", "20",
        "--no-progress", "--iterations", "40", "--out", str(out)])
    assert state == "COMPLETED", log[-3000:]
    digests = DIGEST.findall(log)
    assert sorted(r for r, _ in digests) == ["0", "1", "2", "3"], log[-3000:]
    assert len({d for _, d in digests}) == 1, log[-3000:]
    deadline = time.monotonic() + 10  # the images' squashfuse mounts go with the steps
    while (left := subprocess.run(["pgrep", "-u", str(uid), "-f", "squashfuse"],
                                  capture_output=True, text=True).stdout.split()):
        assert time.monotonic() < deadline, f"squashfuse left running: {left}"
        time.sleep(0.2)


@pytest.mark.debian13
def test_ranks_in_the_image_on_slurm_24_11_through_pyxis(sandbox_pyxis_debian13, cpu_sqfs):
    """The same on the debian13 stack (pyxis built inside the root against Slurm 24.11), as
    the root's user: the image's Open MPI 4.1 and PMIx 4.2 client, started through enroot by
    Slurm 24.11's PMIx 5 server (the hybrid model)."""
    pins = load_pins()
    ctx = jobs_as_user(sandbox_pyxis_debian13, "sandbox-pyxis-debian13", pins.user, cpu_sqfs)
    state, log = submit(ctx, "report", [
        "python3", str(ctx["tree"] / "tests" / "programs" / "report_mpi.py")])
    assert state == "COMPLETED", log[-3000:]
    ranks = sorted(json_objects(log), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3] and {r["size"] for r in ranks} == {4}
    assert sorted(r["host"] for r in ranks) == ["node1", "node1", "node2", "node2"]
    seen = {(r["os"], r["python"], r["mpi"], r["pmix_server"], r["uid"]) for r in ranks}
    assert seen == {(IMAGE_OS, IMAGE_PYTHON, "Open MPI v4.1.4", "5.0.7a1", pins.uid)}, seen
    assert [line for line in log.splitlines() if not line.startswith("{")] == [], log



@pytest.mark.debian13
def test_a_dockerd_image_through_pyxis_as_root(sandbox_pyxis_debian13, cpu_image):
    """``--image dockerd://TAG``: each node's enroot imports the suite's cpu image from the
    suite's dockerd (its socket at the nodes' /run/docker.sock, the root's docker CLI) into the
    job's named container (the Plan names a registry's image; pyxis and its epilog run
    ``enroot list``, which needs ``column``); the ranks find the image's venv python3 through
    the recipe's /etc/profile.d file (enroot starts a login shell). As root: the socket is
    root's. The epilog removes the container and drains no node."""
    sb = sandbox_pyxis_debian13
    ctx = {"sb": sb, "tree": user_tree(sb), "profile": resolve_site("sandbox-pyxis-debian13"),
           "image": ["--image", f"dockerd://{cpu_image}"]}
    state, log = submit(ctx, "dockerd", [
        "python3", str(ctx["tree"] / "tests" / "programs" / "report_mpi.py")])
    assert state == "COMPLETED", log[-3000:]
    ranks = sorted(json_objects(log), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3] and {r["size"] for r in ranks} == {4}
    seen = {(r["os"], r["python"], r["mpi"], r["pmix_server"], r["uid"]) for r in ranks}
    assert seen == {(IMAGE_OS, IMAGE_PYTHON, "Open MPI v4.1.4", "5.0.7a1", 0)}, seen
    data = [scratch.node_folder(sb.settings, n) / "enroot" / "data" / "user-0"
            for n in sb.settings.node_names()]
    deadline = time.monotonic() + 60  # the job epilog removes the named containers
    while any(any(d.iterdir()) for d in data if d.is_dir()):
        assert time.monotonic() < deadline, [list(d.iterdir()) for d in data]
        time.sleep(0.5)
    assert not sb.slurm.output(["sinfo", "-h", "-R"]).strip()
