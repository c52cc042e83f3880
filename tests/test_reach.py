"""chainermn_rt.reach against the kernel itself: for generated modes and owners of a folder
chain and a file, ``blocker`` finds nothing exactly when a process of that user (setpriv)
can open the file; and submit's check names the folder that stops a job's user, exit 2,
before anything reaches Slurm."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chainermn_rt.reach import EXECUTE, READ, WRITE, Who, blocker

from conftest import PYTHON, REPO, require_commands

UID = GID = 4242  # a user and group this machine need not know: the kernel judges numbers
SOMEONE = Who("someone", UID, frozenset({GID}))
MODES = st.integers(0, 0o777)
OWNERS = st.sampled_from([(0, 0), (UID, 0), (0, GID), (UID, GID)])


@pytest.fixture
def open_folder():
    """A new folder any user may enter (pytest's own are root's only)."""
    top = Path(tempfile.mkdtemp(prefix="chainermn-rt-reach-"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top)


def kernel_allows(path: Path, need: int) -> bool:
    """Whether uid UID (group GID, no other groups) may ``need`` on ``path``."""
    probe = ("import os, sys; sys.exit(0 if os.access(sys.argv[1], int(sys.argv[2]), "
             "effective_ids=False) else 1)")
    done = subprocess.run(["setpriv", f"--reuid={UID}", f"--regid={GID}", "--clear-groups",
                           sys.executable, "-I", "-c", probe, str(path),
                           str(_os_mode(need))], capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode == 0


def _os_mode(need: int) -> int:
    return (os.R_OK if need & READ else 0) | (os.W_OK if need & WRITE else 0) | \
        (os.X_OK if need & EXECUTE else 0)


@settings(max_examples=60, deadline=None)
@given(chain=st.lists(st.tuples(MODES, OWNERS), min_size=1, max_size=3),
       file=st.tuples(MODES, OWNERS), need=st.sampled_from([READ, WRITE, EXECUTE,
                                                           READ | EXECUTE, WRITE | EXECUTE]),
       link=st.booleans())
def test_blocker_agrees_with_the_kernel(chain, file, need, link):
    require_commands("setpriv")
    top = Path(tempfile.mkdtemp(prefix="chainermn-rt-reach-"))
    top.chmod(0o755)
    try:
        _check(top, chain, file, need, link)
    finally:
        shutil.rmtree(top)


def _check(top, chain, file, need, link):
    folder = top
    for i, _ in enumerate(chain):
        folder = folder / f"d{i}"
        folder.mkdir()
    target = folder / "f"
    target.write_text("x")
    for path, (mode, (uid, gid)) in [*zip(_folders(top, len(chain)), chain, strict=True),
                                     (target, file)]:
        os.chown(path, uid, gid)
        path.chmod(mode)
    asked = target
    if link:  # reached through a link in an open folder: the target's own folders count
        asked = top / "link"
        asked.symlink_to(target)
    found = blocker(asked, SOMEONE, need)
    assert (found is None) == kernel_allows(asked, need), found


def _folders(top: Path, n: int) -> list[Path]:
    return [top.joinpath(*(f"d{j}" for j in range(i + 1))) for i in range(n)]


def test_the_line_names_the_folder_mode_and_owner(open_folder):
    (open_folder / "private").mkdir(mode=0o700)
    (open_folder / "private" / "a.sif").write_text("x")
    assert blocker(open_folder / "private" / "a.sif", SOMEONE, READ) == (
        f"the folder {open_folder / 'private'} (drwx------ root:root) does not let user "
        "someone in")
    (open_folder / "private").chmod(0o755)
    (open_folder / "private" / "a.sif").chmod(0o600)
    assert blocker(open_folder / "private" / "a.sif", SOMEONE, READ) == (
        f"the file {open_folder / 'private' / 'a.sif'} (-rw------- root:root) does not let "
        "user someone read it")


def test_a_path_not_on_this_machine_is_not_judged(open_folder):
    assert blocker(open_folder / "nowhere" / "a.sif", SOMEONE, READ) is None


@pytest.mark.parametrize("runtime", ["none", "apptainer"])
def test_submit_names_what_stops_the_jobs_user_and_submits_nothing(open_folder, runtime):
    """A profile whose jobs run as nobody (sbatch's --uid), a script in a folder only root
    may enter: one line, exit 2, and sbatch never ran (there is none on PATH)."""
    private = open_folder / "home"
    private.mkdir(mode=0o700)
    (private / "train.py").write_text("print('hi')\n")
    image = open_folder / "images" / "x.sif"  # not there: judged by nobody
    profile = open_folder / "as-nobody.toml"
    profile.write_text((REPO / "slurm/sites/cpu-cluster.toml").read_text()
                       + '\n[sbatch]\nuid = "nobody"\n')
    jobs = open_folder / "jobs"
    jobs.mkdir(mode=0o777)
    jobs.chmod(0o777)
    extra = ["--runtime", runtime] + (["--image", str(image)] if runtime != "none" else [])
    done = subprocess.run([PYTHON, "-m", "chainermn_rt", "submit", "--site", str(profile),
                           "--nodes", "1", *extra, "--python", "/usr/bin/python3", "--",
                           "/usr/bin/python3", str(private / "train.py")],
                          cwd=jobs, capture_output=True, text=True,
                          env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == (
        f"chainermn-rt submit: error: the command's argument 1: {private / 'train.py'} is out "
        "of reach of user nobody (uid 65534), as whom the job runs: the folder "
        f"{private} (drwx------ root:root) does not let user nobody in; allowed: what that "
        "user may reach on every node, e.g. a shared project folder\n")
    assert done.stdout == ""
