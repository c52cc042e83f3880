"""The Debian 13 root of the sandbox's debian13 stack, for real: built from Debian's packages at
the pinned versions (or reused when it matches them), its programs run through the one wrapper,
and a root that cannot be made is one line (chainermn_rt/sandbox/root.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time

import pytest

from chainermn_rt.errors import EnvironmentProblem
from chainermn_rt.sandbox import root as rootmod
from chainermn_rt.sandbox.debian import MIRROR_VAR
from chainermn_rt.sandbox.root import (
    STAMP,
    Root,
    differences,
    ensure_root,
    installed,
    load_pins,
    run_in_root,
)

from conftest import PYTHON

UNREACHABLE = "http://127.0.0.1:9/debian"  # the discard port: nothing listens

pytestmark = pytest.mark.debian13


def inside(root: Root, argv: list[str], **kwargs) -> str:
    proc = run_in_root(root, argv, capture_output=True, text=True, timeout=120, **kwargs)
    assert proc.returncode == 0, f"{argv}: {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def test_the_root_holds_exactly_the_pinned_versions(debian13_root):
    pins = load_pins()
    assert differences(debian13_root) == []
    assert installed(debian13_root.rootfs, pins.versions()) == pins.versions()
    assert rootmod.unpacked(debian13_root) == pins.older  # Debian 12's libmariadb3, for slurmdbd
    assert (debian13_root.rootfs / pins.library_path().lstrip("/") / "libmariadb.so.3").is_file()
    stamp = json.loads((debian13_root.rootfs / STAMP).read_text())
    assert stamp["key"] == pins.key() == debian13_root.folder.name.removeprefix("debian13-")
    assert inside(debian13_root, ["sh", "-c", ". /etc/os-release && echo $VERSION_CODENAME"]) \
        == "trixie\n"


def test_todays_stack_runs_through_the_wrapper(debian13_root, tmp_path):
    conf = tmp_path / "slurm.conf"  # the client commands read one before they say anything
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\n")
    assert inside(debian13_root, ["apptainer", "version"]) == "1.4.5\n"
    assert inside(debian13_root, ["slurmctld", "-V"]) == "slurm-wlm 24.11.5\n"
    assert inside(debian13_root, ["slurmd", "-V"]) == "slurm-wlm 24.11.5\n"
    assert inside(debian13_root, ["env", f"SLURM_CONF={conf}", "srun", "--version"],
                  binds=[tmp_path]) == "slurm-wlm 24.11.5\n"
    assert inside(debian13_root, ["mpirun", "--version"]).splitlines()[0] \
        == "mpirun (Open MPI) 5.0.7"
    library = inside(debian13_root, ["python3", "-c", "from mpi4py import MPI; "
                                     "print(MPI.Get_library_version().split(',')[0])"])
    assert library == "Open MPI v5.0.7\n"
    pmix = inside(debian13_root, ["sh", "-c", "ls /usr/lib/x86_64-linux-gnu/slurm-wlm/"])
    assert "mpi_pmix_v5.so" in pmix.split()
    user = load_pins().user
    assert inside(debian13_root, ["id", "-u", user]) == f"{load_pins().uid}\n"
    conf_text = (debian13_root.rootfs / "etc/apptainer/apptainer.conf").read_text()
    for key, value in rootmod.APPTAINER_CONF.items():
        assert f"\n{key} = {value}\n" in conf_text


def test_the_wrapper_binds_names_and_leaves_the_root_unchanged(debian13_root, tmp_path):
    (tmp_path / "in.txt").write_text("from the host\n")
    said = inside(debian13_root, ["sh", "-c", 'cat "$0/in.txt"; hostname; pwd; '
                                  'touch /etc/written-inside && echo wrote; echo out > "$0/out"',
                                  str(tmp_path)], binds=[tmp_path], hostname="node7",
                  cwd=tmp_path)
    assert said.splitlines() == ["from the host", "node7", str(tmp_path), "wrote"]
    assert (tmp_path / "out").read_text() == "out\n"
    assert not (debian13_root.rootfs / "etc/written-inside").exists()
    assert os.uname().nodename != "node7"


def test_a_second_start_reuses_the_root_after_checking_it(debian13_root):
    said: list[str] = []
    stamp = (debian13_root.rootfs / STAMP).stat()
    again = ensure_root(say=said.append)
    assert again == debian13_root and said == []
    assert (again.rootfs / STAMP).stat().st_ino == stamp.st_ino


def test_a_root_that_differs_from_its_pins_is_found(debian13_root, monkeypatch):
    pins = load_pins()
    changed = dataclasses.replace(pins, packages={**pins.packages, "slurmd": "99.1-1"})
    key = pins.key()
    monkeypatch.setattr(rootmod.Pins, "key", lambda self: key)  # the same folder
    found = differences(Root(debian13_root.folder, changed))
    assert found == ["slurmd 24.11.5-4+deb13u1 (pinned 99.1-1)"]


def test_a_stale_root_is_removed_and_a_failed_build_leaves_nothing(tmp_path, monkeypatch):
    pins = load_pins()
    stale = tmp_path / f"debian13-{pins.key()}" / "rootfs"
    stale.mkdir(parents=True)  # no stamp: not a root of these pins
    (tmp_path / "debian13-0123456789ab" / "rootfs").mkdir(parents=True)  # other pins
    monkeypatch.setenv(MIRROR_VAR, UNREACHABLE)
    said: list[str] = []
    with pytest.raises(EnvironmentProblem) as err:
        ensure_root(cache=tmp_path, say=said.append)
    assert "\n" not in str(err.value)
    assert f"the Debian mirror {UNREACHABLE} cannot be reached" in str(err.value)
    assert any("differs from its pins (no etc/chainermn-rt-root.json)" in s for s in said)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([
        ".lock", "debian13-0123456789ab", f"build-{pins.key()}.log"])


def test_a_version_gone_from_the_mirror_is_one_line(tmp_path):
    pins = load_pins()
    gone = dataclasses.replace(pins, packages={**pins.packages, "slurmd": "24.11.4-1"},
                               unstable={"apptainer": "1.4.4-1"})
    with pytest.raises(EnvironmentProblem) as err:
        ensure_root(gone, cache=tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert "no longer has slurmd 24.11.4-1 (trixie), apptainer 1.4.4-1 (sid); put the " \
           "versions it now has" in message and message.endswith("debian13.toml")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("debian13-", ".build-"))]


def test_a_root_that_cannot_be_entered_is_one_line(tmp_path):
    fake = Root(tmp_path, load_pins())
    for folder in ("rootfs/proc", "rootfs/sys", "rootfs/dev", "rootfs/run", "overlay"):
        (fake.folder / folder).mkdir(parents=True)
    with pytest.raises(EnvironmentProblem) as err:  # no umount, no sh inside: pivoted, stuck
        rootmod._probe(fake)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(
        f"cannot run commands inside the Debian 13 root {fake.rootfs}: enter-root: ")


def test_cli_root_prints_the_folder_or_runs_a_command(debian13_root, tmp_path):
    where = subprocess.run([PYTHON, "-m", "chainermn_rt", "sandbox", "root"], cwd=tmp_path,
                           capture_output=True, text=True, check=False, timeout=120)
    assert (where.returncode, where.stdout) == (0, f"{debian13_root.rootfs}\n")
    ran = subprocess.run([PYTHON, "-m", "chainermn_rt", "sandbox", "root", "--", "sh", "-c",
                          "pwd; apptainer version; exit 4"], cwd=tmp_path, capture_output=True,
                         text=True, check=False, timeout=120)
    assert (ran.returncode, ran.stdout) == (4, f"{tmp_path}\n1.4.5\n")


def test_cli_a_root_that_cannot_be_built_is_one_line_exit_3(tmp_path):
    env = {**os.environ, rootmod.CACHE_VAR: str(tmp_path), MIRROR_VAR: UNREACHABLE}
    proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "sandbox", "root"], env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 3 and proc.stdout == ""
    assert lines[-1].startswith("chainermn-rt sandbox: error: the Debian 13 root cannot be built")
    assert "Traceback" not in proc.stderr


def test_roots_of_other_pins_are_kept_while_used_and_removed_after(tmp_path):
    pins = load_pins()
    keep = Root(tmp_path / f"debian13-{pins.key()}", pins)
    keep.rootfs.mkdir(parents=True)
    recent, old = tmp_path / "debian13-0123456789ab", tmp_path / "debian13-ba9876543210"
    for other in (recent, old):
        (other / "rootfs").mkdir(parents=True)
        (other / rootmod.USED).touch()
    (tmp_path / "build-ba9876543210.log").write_text("old\n")
    (tmp_path / ".build-0123456789ab-99").mkdir()  # an interrupted build (the lock is held)
    long_ago = time.time() - rootmod.KEEP_UNUSED_S - 60
    os.utime(old / rootmod.USED, (long_ago, long_ago))
    rootmod._remove_others(tmp_path, keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([keep.folder.name, recent.name])
    assert (keep.folder / rootmod.USED).stat().st_mtime > long_ago
