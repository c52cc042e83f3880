"""The ``sandbox`` fixture: one real Slurm sandbox per test session (see docs/sandbox.md).

    def test_two_nodes(sandbox):
        job = submit_text(sandbox, "#!/bin/sh\\nsrun hostname\\n", ["--nodes=2"])
        assert sandbox.slurm.wait(job) == ("COMPLETED", 0)
        print(job_output(sandbox, job))

The fixture is a :class:`chainermn_rt.sandbox.Sandbox` in this checkout's build/sandbox:
``sandbox.slurm`` submits, waits and runs client commands (``chainermn_rt.slurm_client.Slurm``),
``sandbox.job_record(job)`` reads Slurm's record of a finished job. A sandbox already up there
is reused and left up; one the fixture started is brought down at the end of the session.
Failing to start fails the test, never skips.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from chainermn_rt.errors import EnvironmentProblem
from chainermn_rt.sandbox import Sandbox, SandboxError, pyxis_build
from chainermn_rt.sandbox.root import Root, ensure_root

from conftest import REPO, require_commands

SANDBOX_COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "ip",
                    "nsenter", "unshare")


@pytest.fixture(scope="session")
def sandbox():
    require_commands(*SANDBOX_COMMANDS)
    sb = Sandbox.from_profile()
    started = not sb.status().up
    if started:
        try:
            sb.up()
        except SandboxError as err:
            pytest.fail(f"the Slurm sandbox did not start: {err}", pytrace=False)
    yield sb
    if started:
        sb.down()


def submit_text(sb: Sandbox, text: str, args: list[str] = ()) -> str:
    """Submit a script given as text; its output goes to ``job_output``'s file."""
    jobs = sb.state_dir / "jobs"
    jobs.mkdir(exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=jobs, prefix="script-", suffix=".sh",
                                     delete=False) as f:
        f.write(text)
    path = Path(f.name)
    return sb.slurm.submit(path, [f"--output={jobs / 'slurm-%j.out'}", *args], cwd=jobs)


def job_output(sb: Sandbox, job: str) -> str:
    path = sb.state_dir / "jobs" / f"slurm-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="module")
def sandbox_dgx16(tmp_path_factory):
    """A second sandbox beside the session's, for one test module: 16 DGX-shaped nodes
    (slurm/sites/sandbox-dgx.toml, 8 fake GPUs each) in a state folder of its own."""
    require_commands(*SANDBOX_COMMANDS)
    sb = Sandbox.from_profile("sandbox-dgx", nodes=16,
                              state_dir=tmp_path_factory.mktemp("dgx16") / "state")
    try:
        sb.up()
    except SandboxError as err:
        pytest.fail(f"the 16-node sandbox did not start: {err}", pytrace=False)
    yield sb
    sb.down()


@pytest.fixture(scope="session")
def debian13_root() -> Root:
    """The Debian 13 root (chainermn_rt/sandbox/root.py) in this machine's cache: built the
    first time (about a minute), checked against its pins after. Not built: the test fails."""
    try:
        return ensure_root()
    except EnvironmentProblem as err:
        pytest.fail(f"the Debian 13 root is not there and could not be built: {err}",
                    pytrace=False)


# Where a site keeps what its users share (a project file system): outside /tmp and /var/tmp,
# which Apptainer binds itself, and outside any home, so that what a job needs there is bound
# as a site binds it, and reached by the user as on a cluster (docs/sandbox.md).
SITE_FOLDER = Path("/srv/chainermn-rt-tests")


def site_folder(prefix: str) -> Path:
    """A new folder in :data:`SITE_FOLDER` that any user may enter."""
    SITE_FOLDER.mkdir(mode=0o755, parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=SITE_FOLDER))
    folder.chmod(0o755)
    return folder


@pytest.fixture(scope="session")
def sandbox_debian13(debian13_root):
    """The sandbox on the debian13 stack (Slurm 24.11, PMIx 5, Open MPI 5, Apptainer 1.4.5 from
    the Debian 13 root) of the shipped profile sandbox-debian13 (its ``[sandbox] stack``), one
    for the session, in a state folder of its own beside the ``sandbox`` fixture's: in
    :data:`SITE_FOLDER`, searchable by the root's unprivileged user, whose jobs need its munge
    socket (pytest's own folders are root's only, a clone's may be too). Its TmpFS and
    SlurmdSpoolDir are there too, where no container sees them unless the job binds them."""
    require_commands("ip", "nsenter", "unshare")
    folder = site_folder("debian13-")
    yield from _up_in(Sandbox.from_profile("sandbox-debian13", state_dir=folder / "state"),
                      folder, "the debian13 sandbox")


def _up_in(sb: Sandbox, folder: Path, what: str):
    """``sb`` up while the generator is, then down and ``folder`` removed; a failed start fails
    the test."""
    try:
        sb.up()
    except SandboxError as err:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.fail(f"{what} did not start: {err}", pytrace=False)
    yield sb
    sb.down()
    shutil.rmtree(folder, ignore_errors=True)


def pyxis_sandbox(profile: str, root: Root | None = None):
    """The sandbox of a shipped pyxis profile (its slurmd loading pyxis, enroot on every node)
    in a folder of its own in /tmp (its unprivileged user's jobs need the munge socket), up
    while the generator is; enroot and pyxis not built (`make setup`): the test fails."""
    require_commands(*SANDBOX_COMMANDS)
    folder = Path(tempfile.mkdtemp(prefix=f"chainermn-rt-{profile}-"))
    sb = Sandbox.from_profile(profile, state_dir=folder / "state")
    try:
        pyxis_build.find(sb.settings.stack, root)
    except EnvironmentProblem as err:
        pytest.fail(str(err), pytrace=False)
    folder.chmod(0o755)
    yield from _up_in(sb, folder, f"the {profile} sandbox")


@pytest.fixture(scope="module")
def sandbox_pyxis():
    """sandbox-pyxis: the Debian 12 stack with pyxis, for one test module."""
    yield from pyxis_sandbox("sandbox-pyxis")


@pytest.fixture(scope="module")
def sandbox_pyxis_debian13(debian13_root, engine):
    """sandbox-pyxis-debian13: Slurm 24.11's slurmd with pyxis in the Debian 13 root, the
    suite's dockerd (``engine``) at each node's /run/docker.sock (``up`` reads DOCKER_HOST)."""
    before = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = engine.host
    try:
        sandboxes = pyxis_sandbox("sandbox-pyxis-debian13", debian13_root)
        sb = next(sandboxes)
    finally:
        if before is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = before
    yield sb
    next(sandboxes, None)  # down


def user_tree(sb: Sandbox) -> Path:
    """Copies of examples/ and tests/programs/ in the sandbox's shared folder, at the same
    relative places, that its unprivileged user (and so a container) can read."""
    tree = user_folder(sb, "tree")
    for part in ("examples", "tests/programs"):
        shutil.copytree(REPO / part, tree / part, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for path in (tree, *tree.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return tree


def user_folder(sb: Sandbox, name: str) -> Path:
    """A folder in the sandbox's state folder that the root's unprivileged user can read and
    write (the sandbox removes it with its state folder)."""
    path = sb.state_dir / "jobs" / name
    path.mkdir(mode=0o777, exist_ok=True)
    path.chmod(0o777)
    return path
