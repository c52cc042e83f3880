"""Staging data to node-local storage (``--stage``), without Slurm: the profile's
local_scratch, the Plan's decisions and refusals, ``chainermn_rt.staging.local_path``, the copy
(``data stage``) and its checks, the sweep of stale folders, the sandbox's per-node scratch,
and the job script's copy and removal run by bash with stubs for srun, squeue and scontrol.
tests/test_staging_sandbox.py runs the same with real Slurm.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from chainermn_rt import stage_copy as stage_module
from chainermn_rt.cli import main
from chainermn_rt.data.manifest import Manifest, Shard, shard_name, to_json
from chainermn_rt.errors import EnvironmentProblem, UserError
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.quoting import sh_join
from chainermn_rt.sandbox import scratch
from chainermn_rt.sandbox.settings import sandbox_settings
from chainermn_rt.site import load_site, resolve_site
from chainermn_rt.stage_copy import STALE_AFTER_S, copy_folder, copy_step, sweep
from chainermn_rt.staging import (
    FOLDER_PREFIX,
    STAGE_DIR_VAR,
    STAGE_FROM_VAR,
    STAGE_LIVE_JOBS_VAR,
    local_path,
)
from chainermn_rt.submission import write_script

from conftest import PYTHON, REPO, folder_contents

SANDBOX = load_site(resolve_site("sandbox"))
SCRATCH = "/tmp/chainermn-rt-sandbox-scratch"  # the sandbox profile's local_scratch
GOOD_SOURCE = "/lustre/imagenet/shards/train"


def _shards(folder: Path, sizes=(512, 1024, 1536)) -> Manifest:
    """A shard folder: shards of the given sizes (random bytes), its manifest, one file more."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, size in enumerate(sizes):
        data = os.urandom(size)
        (folder / shard_name(i)).write_bytes(data)
        entries.append(Shard(shard_name(i), 2, size, hashlib.sha256(data).hexdigest()))
    manifest = Manifest(("cat", "dog"), None, tuple(entries))
    (folder / "manifest.json").write_text(to_json(manifest))
    (folder / "unlisted.txt").write_text("not a shard")
    return manifest


def _cli(capsys, *args: str) -> tuple[int, str]:
    """``chainermn-rt ARGS`` in this process: (exit status, stderr); stdout in ``_cli.out``."""
    status = main(list(args))
    captured = capsys.readouterr()
    _cli.out = captured.out
    return status, captured.err


# -- the profile ----------------------------------------------------------------------------

def _profile(tmp_path: Path, top: str = "", partition: str = "") -> Path:
    text = (REPO / "slurm" / "sites" / "sandbox.toml").read_text()
    text = text.replace(f'local_scratch = "{SCRATCH}"\n', top)
    text = text.replace('name = "cpu"\n', f'name = "cpu"\n{partition}')
    path = tmp_path / "site.toml"
    path.write_text(text)
    return path


def test_local_scratch_is_a_default_for_every_partition_and_a_partition_may_differ(tmp_path):
    assert [p.local_scratch for p in SANDBOX.partitions] == [SCRATCH, SCRATCH]
    site = load_site(_profile(tmp_path, 'local_scratch = "/local//scratch/"\n',
                              'local_scratch = "/tmp"\n'))
    assert [p.local_scratch for p in site.partitions] == ["/local/scratch", "/tmp"]
    site = load_site(_profile(tmp_path))
    assert [p.local_scratch for p in site.partitions] == [None, None]


@pytest.mark.parametrize("value", ["scratch", "/", "//", "$TMPDIR", "/local scratch",
                                   "/a:b", "/a,b", "/a\nb", "/a\tb", "/a\x7fb", "", 3])
@pytest.mark.parametrize("where", ["top", "partition"])
def test_a_bad_local_scratch_is_one_line_naming_the_field(tmp_path, value, where):
    line = f"local_scratch = {json.dumps(value)}\n"
    path = _profile(tmp_path, *((line, "") if where == "top" else ("", line)))
    with pytest.raises(UserError) as err:
        load_site(path)
    field = "local_scratch" if where == "top" else "partitions[1].local_scratch"
    message = str(err.value)
    assert message.startswith(f"{path}: {field}: ") and "\n" not in message, message
    assert "allowed: " in message


# -- the Plan -------------------------------------------------------------------------------

def _plan(site=SANDBOX, **request):
    return make_plan(site, Request(**{"nodes": 2, "command": ("python3", "train.py"),
                                      **request}))


def test_the_plan_stages_each_source_on_every_node_once():
    plan = _plan(stage=(GOOD_SOURCE + "/", "/lustre//imagenet/shards/val"), python="/py")
    st = plan.stage
    assert st.sources == (GOOD_SOURCE, "/lustre/imagenet/shards/val")
    assert st.scratch == SCRATCH and st.folder == f"{SCRATCH}/{FOLDER_PREFIX}"
    one_per_node = ("srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                    "--kill-on-bad-exit=1", "--mpi=none")
    assert st.copy == (*one_per_node, "/py", "-m", "chainermn_rt", "data", "stage", "--job")
    assert st.remove == (*one_per_node, "rm", "-rf", "--")
    assert json.loads(st.sources_json) == list(st.sources)
    assert (st.dir_var, st.from_var, st.live_var) == (STAGE_DIR_VAR, STAGE_FROM_VAR,
                                                     STAGE_LIVE_JOBS_VAR)
    assert _plan().stage is None


def test_the_copy_step_runs_in_the_container_which_sees_the_scratch():
    plan = _plan(stage=(GOOD_SOURCE,), runtime="charliecloud", image="/img", launcher="mpirun")
    bind = ("-b", f"{SCRATCH}:{SCRATCH}")
    assert plan.container == ("ch-run", "--set-env", *bind, "/img", "--")
    assert plan.stage.copy[:6] == ("srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                                   "--kill-on-bad-exit=1", "--mpi=none")  # srun under mpirun
    assert plan.stage.copy[6:12] == plan.container
    assert plan.launch[0] == "mpirun"
    site = replace(SANDBOX, container=replace(SANDBOX.container, binds=(SCRATCH + "/",)))
    plan = _plan(site, stage=(GOOD_SOURCE,), runtime="charliecloud", image="/img")
    assert plan.container.count("-b") == 1  # bound already
    plan = _plan(stage=(GOOD_SOURCE,), runtime="pyxis", image="/img.sqsh")
    assert "--container-image=/img.sqsh" in plan.stage.copy
    # the ranks' flags: the scratch and the job's folder mounted, the stage's variables kept
    copy = sh_join(plan.stage.copy)
    assert f'--container-mounts={SCRATCH}:{SCRATCH},"${{PWD}}"' in copy
    assert "CHAINERMN_RT_STAGE_DIR,CHAINERMN_RT_STAGE_FROM,CHAINERMN_RT_STAGE_LIVE_JOBS" in copy
    assert "--container-image=/img.sqsh" not in plan.stage.remove
    assert _plan(runtime="charliecloud", image="/img").container.count("-b") == 0


def test_stage_on_a_partition_without_local_scratch_is_refused_naming_both():
    site = load_site(resolve_site("quad-gpu"))
    assert all(p.local_scratch is None for p in site.partitions)
    with pytest.raises(UserError) as err:
        make_plan(site, Request(nodes=1, stage=(GOOD_SOURCE,), command=("x",)))
    assert str(err.value).startswith("--stage: partition 'gpu' of site 'quad-gpu' has no "
                                     "local_scratch; allowed: "), str(err.value)


@pytest.mark.parametrize("paths, message", [
    (("shards/train",), "--stage: 'shards/train' is a relative path; allowed: an absolute"),
    (("/",), "--stage: '/'; allowed:"),
    (("/a/../",), "--stage: '/a/../'; allowed:"),
    (("/data\nx",), "--stage: '/data\\nx' contains a control character"),
    (("/data\x1b[31m",), "contains a control character"),
    (("/data\0",), "contains a NUL byte"),
    (("/data", "/data/"), "--stage: '/data' given twice"),
    (("/data/train", "/data"), "--stage: '/data/train' lies in '/data', staged already"),
])
def test_bad_stage_paths_are_refused_in_one_line(paths, message):
    with pytest.raises(UserError) as err:
        _plan(stage=paths)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("name", [STAGE_DIR_VAR, STAGE_FROM_VAR, STAGE_LIVE_JOBS_VAR])
def test_the_stage_variables_cannot_be_set_with_env(name):
    with pytest.raises(UserError, match=f"--env: .*{name}.* are set by chainermn-rt"):
        _plan(env=((name, "/x"),))


def test_render_takes_stage_repeatably_and_refuses_a_relative_one(tmp_path, capsys):
    out = tmp_path / "job.sh"
    status, err = _cli(capsys, "render", "--site", "sandbox", "--nodes", "2", "--stage",
                       "/data/a", "--stage", "/data/b", "--output", str(out), "--", "x")
    assert status == 0, err
    assert f"export {STAGE_FROM_VAR}='[\"/data/a\", \"/data/b\"]'" in out.read_text()
    status, err = _cli(capsys, "render", "--site", "sandbox", "--nodes", "2", "--stage",
                       "data/a", "--output", str(tmp_path / "other.sh"), "--", "x")
    assert status == 2 and err.count("\n") == 1 and "--stage: 'data/a'" in err, err
    assert not (tmp_path / "other.sh").exists()


# -- where ranks find the copy --------------------------------------------------------------

def _env(*sources: str, folder: str = "/scratch/chainermn-rt-stage-9") -> dict[str, str]:
    return {STAGE_DIR_VAR: folder, STAGE_FROM_VAR: json.dumps(list(sources))}


def test_local_path_maps_staged_folders_and_what_lies_below_them(tmp_path, monkeypatch):
    env = _env("/data/a", "/data/b", "/data/ab/c")
    assert local_path("/data/a", env) == "/scratch/chainermn-rt-stage-9/0"
    assert local_path("/data/a/", env) == "/scratch/chainermn-rt-stage-9/0"
    assert local_path("/data//b/./x/y.tar", env) == "/scratch/chainermn-rt-stage-9/1/x/y.tar"
    assert local_path("/data/ab/c/d", env) == "/scratch/chainermn-rt-stage-9/2/d"
    for unchanged in ("/data/ab", "/data/abc", "/data", "/other/a", "relative/x"):
        assert local_path(unchanged, env) == unchanged
    monkeypatch.chdir(tmp_path)
    assert local_path("x/y", _env(str(tmp_path))) == "/scratch/chainermn-rt-stage-9/0/x/y"
    assert local_path("/data/a", {}) == "/data/a"  # not staged: as it is
    monkeypatch.setenv(STAGE_DIR_VAR, "/s/x")
    monkeypatch.setenv(STAGE_FROM_VAR, '["/data/a"]')
    assert local_path("/data/a/f") == "/s/x/0/f"  # the process's environment by default


def test_local_path_of_the_longest_staged_folder_wins():
    # not from one render (it refuses nesting), but a hand-made environment may nest them
    env = _env("/data", "/data/train")
    assert local_path("/data/train/x", env) == "/scratch/chainermn-rt-stage-9/1/x"
    assert local_path("/data/val/x", env) == "/scratch/chainermn-rt-stage-9/0/val/x"


@pytest.mark.parametrize("env, name", [
    ({STAGE_DIR_VAR: "/s", STAGE_FROM_VAR: "not json"}, STAGE_FROM_VAR),
    ({STAGE_DIR_VAR: "/s", STAGE_FROM_VAR: '["relative"]'}, STAGE_FROM_VAR),
    ({STAGE_DIR_VAR: "/s", STAGE_FROM_VAR: '[1]'}, STAGE_FROM_VAR),
    ({STAGE_DIR_VAR: "", STAGE_FROM_VAR: '["/a"]'}, STAGE_DIR_VAR),
    ({STAGE_DIR_VAR: "rel", STAGE_FROM_VAR: '["/a"]'}, STAGE_DIR_VAR),
])
def test_a_malformed_stage_variable_is_one_line_naming_it(env, name):
    with pytest.raises(UserError) as err:
        local_path("/a", env)
    assert str(err.value).startswith(f"{name}: ")


# -- the copy -------------------------------------------------------------------------------

def test_a_shard_folder_is_copied_as_its_manifest_lists_it(tmp_path, capsys):
    src, dest = tmp_path / "src", tmp_path / "dest"
    manifest = _shards(src)
    status, err = _cli(capsys, "data", "stage", str(src), str(dest))
    assert status == 0, err
    assert sorted(p.name for p in dest.iterdir()) == ["manifest.json",
                                                      *(s.name for s in manifest.shards)]
    for shard in manifest.shards:
        assert (dest / shard.name).read_bytes() == (src / shard.name).read_bytes()
    assert (dest / "manifest.json").read_bytes() == (src / "manifest.json").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest", "src"]  # no partial left
    assert _cli.out.startswith(f"{src} -> {dest}: 4 files, 0.0 MB in "), _cli.out


def test_any_other_folder_is_copied_as_it_is(tmp_path):
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "deep.bin").write_bytes(os.urandom(3 << 20))  # more than one buffer
    (src / "top.txt").write_text("top")
    (src / "empty").mkdir()
    (src / "link").symlink_to("a/b/deep.bin")
    (src / "a" / "run.sh").write_text("#!/bin/sh\n")
    (src / "a" / "run.sh").chmod(0o755)
    copied = copy_folder(src, tmp_path / "dest")
    assert folder_contents(tmp_path / "dest") == folder_contents(src)
    assert (tmp_path / "dest" / "a" / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (copied.files, copied.bytes) == (3, (3 << 20) + 3 + len("#!/bin/sh\n"))


def test_a_complete_copy_is_left_alone_and_an_incomplete_one_refused(tmp_path, capsys):
    src, dest = tmp_path / "src", tmp_path / "dest"
    manifest = _shards(src)
    assert not copy_folder(src, dest).already
    before = folder_contents(dest)
    assert copy_folder(src, dest).already and folder_contents(dest) == before
    (dest / manifest.shards[1].name).write_bytes(b"short")  # damaged on the node
    status, err = _cli(capsys, "data", "stage", str(src), str(dest))
    assert status == 2 and err.count("\n") == 1 and "is not a complete copy" in err, err
    copied = copy_folder(src, dest, replace_incomplete=True)  # a job's own folder: copied anew
    assert not copied.already and folder_contents(dest) == before


@pytest.mark.parametrize("damage, says", [
    ("flip", "sha256 "),
    ("short", "bytes, but manifest.json says 1024"),
    ("long", "more than 1024 bytes, but manifest.json says 1024"),
    ("missing", "missing; allowed: every shard manifest.json lists"),
])
def test_a_damaged_shard_is_one_line_naming_it_and_nothing_is_left(tmp_path, capsys, damage,
                                                                   says):
    src, dest = tmp_path / "src", tmp_path / "dest"
    shard = src / _shards(src, sizes=(4 << 20, 1024, 512)).shards[1].name
    data = shard.read_bytes()
    if damage == "flip":
        shard.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    elif damage == "short":
        shard.write_bytes(data[:-1])
    elif damage == "long":
        shard.write_bytes(data + b"\0")
    else:
        shard.unlink()
    status, err = _cli(capsys, "data", "stage", str(src), str(dest))
    assert status == 2, err
    assert err.count("\n") == 1 and f"SRC: {shard}: " in err and says in err, err
    assert err.startswith("chainermn-rt data: error: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no DEST, no partial copy


def test_bad_arguments_are_one_line(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    os.mkfifo(tmp_path / "src" / "fifo")
    cases = [(("data", "stage"), "SRC DEST: missing"),
             (("data", "stage", "--job", str(tmp_path), "x"), "--job: takes no SRC"),
             (("data", "stage", "--job"), "--job: the job script's staging variables"),
             (("data", "stage", str(tmp_path / "nope"), str(tmp_path / "d")), "SRC: "),
             (("data", "stage", str(tmp_path / "src"), str(tmp_path / "no" / "d")),
              "DEST's folder: "),
             (("data", "stage", str(tmp_path / "src"), str(tmp_path / "d")),
              "fifo is neither a file, a folder nor a symbolic link")]
    for args, says in cases:
        status, err = _cli(capsys, *args)
        assert status == 2 and err.count("\n") == 1 and says in err, (args, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_a_copy_that_does_not_fit_is_an_environment_problem(tmp_path, monkeypatch):
    _shards(tmp_path / "src")
    monkeypatch.setattr(stage_module.shutil, "disk_usage",
                        lambda _: SimpleNamespace(total=100, used=0, free=100))
    with pytest.raises(EnvironmentProblem, match="0.00 GB free on .*needs 0.00 GB"):
        copy_folder(tmp_path / "src", tmp_path / "dest")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_a_scratch_that_cannot_be_written_is_one_line_exit_3(tmp_path, capsys, monkeypatch):
    _shards(tmp_path / "src")

    def refused(**_):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    status, err = _cli(capsys, "data", "stage", str(tmp_path / "src"), str(tmp_path / "d"))
    assert status == 3 and err.count("\n") == 1, err
    assert f"{tmp_path}: permission denied on " in err and "cannot take the copy" in err, err


# -- in a job: the copy step and its sweep --------------------------------------------------

def _job_env(tmp_path: Path, job: str, live: str, *sources: Path) -> dict[str, str]:
    folder = tmp_path / "scratch" / f"{FOLDER_PREFIX}{job}"
    return {**_env(*(str(s) for s in sources), folder=str(folder)), "SLURM_JOB_ID": job,
            STAGE_LIVE_JOBS_VAR: live}


def test_the_copy_step_stages_each_source_in_its_place(tmp_path):
    _shards(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.txt").write_text("x")
    (tmp_path / "scratch").mkdir()
    env = _job_env(tmp_path, "12", "12", tmp_path / "a", tmp_path / "b")
    lines = []
    copy_step(env, lines.append)
    folder = Path(env[STAGE_DIR_VAR])
    assert oct(folder.stat().st_mode & 0o777) == "0o700"  # private to the user
    assert local_path(str(tmp_path / "b" / "x.txt"), env) == str(folder / "1" / "x.txt")
    assert (folder / "1" / "x.txt").read_text() == "x"
    assert sorted(p.name for p in (folder / "0").iterdir())[0] == "manifest.json"
    assert len(lines) == 2 and " -> " in lines[0] and "4 files" in lines[0], lines
    copy_step(env, lines.append)  # the same node staged twice
    assert [line.endswith(": complete already, left alone") for line in lines] == \
        [False, False, True, True], lines


def test_a_job_folder_that_is_not_the_users_is_refused(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "scratch").mkdir()
    env = _job_env(tmp_path, "12", "12", tmp_path / "b")
    Path(env[STAGE_DIR_VAR]).symlink_to(tmp_path / "b")  # planted by someone else
    with pytest.raises(EnvironmentProblem, match="is not a folder of this user's"):
        copy_step(env, print)
    env = _job_env(tmp_path / "nowhere", "12", "12", tmp_path / "b")
    with pytest.raises(EnvironmentProblem, match=r"\(local_scratch\) does not exist on "):
        copy_step(env, print)


def test_the_sweep_removes_only_stale_folders_of_jobs_slurm_no_longer_lists(tmp_path):
    scratch_dir = tmp_path / "scratch"
    old = time.time() - STALE_AFTER_S - 60
    for name in ("3", "4", "5", "6"):
        (scratch_dir / f"{FOLDER_PREFIX}{name}" / "0").mkdir(parents=True)
    for name in ("3", "4", "6"):
        os.utime(scratch_dir / f"{FOLDER_PREFIX}{name}", (old, old))
    (scratch_dir / "chainermn-rt-stage-x").mkdir()  # not a job's name
    os.utime(scratch_dir / "chainermn-rt-stage-x", (old, old))
    (scratch_dir / "other").mkdir()
    lines = sweep(scratch_dir, {"4", "9"}, f"{FOLDER_PREFIX}6")
    # 3: stale; 4: listed; 5: changed recently (its job may have started after the list); 6: own
    assert lines == [f"removed {scratch_dir}/{FOLDER_PREFIX}3, left by job 3, which "
                     "Slurm no longer lists"]
    assert sorted(p.name for p in scratch_dir.iterdir()) == [
        f"{FOLDER_PREFIX}4", f"{FOLDER_PREFIX}5", f"{FOLDER_PREFIX}6",
        "chainermn-rt-stage-x", "other"]
    assert sweep(scratch_dir, None, "x") == []  # an unknown list: nothing removed


@pytest.mark.parametrize("live, known", [("12\n4\n", True), ("", False), ("4 5", False),
                                         ("12 x", False)])
def test_the_live_list_counts_only_when_it_holds_this_job(live, known):
    env = {"SLURM_JOB_ID": "12", STAGE_LIVE_JOBS_VAR: live}
    assert (stage_module.live_jobs(env) is not None) == known


# -- the sandbox's per-node scratch ---------------------------------------------------------

def test_each_sandbox_node_mounts_its_own_scratch_at_the_profiles_path(tmp_path):
    s = sandbox_settings(SANDBOX, state_dir=tmp_path / "state")
    assert s.scratch == (SCRATCH,)
    from chainermn_rt.sandbox.daemons import slurmd_argv

    argv = slurmd_argv(s, "node2")
    i = argv.index(scratch.MOUNT_ONE)
    assert argv[i - 2:i + 3] == ["sh", "-c", scratch.MOUNT_ONE,
                                 str(tmp_path / "state" / "scratch" / "node2"), SCRATCH]
    assert argv[i + 3] == "slurmd"
    # the wrapper mounts, then runs the rest (here: echo, as the mount needs root)
    proc = subprocess.run(["sh", "-c", scratch.MOUNT_ONE.replace("mount --bind", "echo"),
                           "/a", "/b", "echo", "then"], capture_output=True, text=True)
    assert proc.stdout == "/a /b\nthen\n"


def test_sandbox_scratch_is_made_checked_and_cleared(tmp_path):
    mount_point = tmp_path / "host" / "scratch"
    s = replace(sandbox_settings(SANDBOX, state_dir=tmp_path / "state"),
                scratch=(str(mount_point),))
    scratch.check(s)
    scratch.make(s)
    assert mount_point.is_dir() and not any(mount_point.iterdir())
    node1 = scratch.node_folder(s, "node1")
    assert oct(node1.stat().st_mode & 0o7777) == "0o1777"
    (node1 / "left-by-a-job").mkdir()
    netns_dir = tmp_path / "netns"
    netns_dir.mkdir()
    (netns_dir / "cmrt0a1b2c-node1").touch()  # another sandbox's node still runs
    scratch.clear(s, netns_dir)
    assert not (tmp_path / "state" / "scratch").exists() and mount_point.is_dir()
    (netns_dir / "cmrt0a1b2c-node1").unlink()
    (netns_dir / "cmrt0a1b2c-head").touch()
    scratch.clear(s, netns_dir)
    assert not mount_point.exists()  # the last sandbox down: nothing left
    (mount_point / "x").mkdir(parents=True)
    with pytest.raises(UserError, match="local_scratch: .* is not an empty folder"):
        scratch.check(s)


# -- the job script, run by bash with stubs ------------------------------------------------

SRUN = """#!/bin/sh
# srun's options dropped; the per-rank step reduced to its command; the rest run here.
while [ "${1#--}" != "$1" ]; do shift; done
if [ "$2" = "-m" ] && [ "$4" = "rank" ]; then shift 5; fi
echo "$*" >> "$STUB_DIR/steps.log"
exec "$@"
"""
SQUEUE = '#!/bin/sh\nprintf "%s\\n" 5 "$SLURM_JOB_ID"\n'
SCONTROL = """#!/bin/sh
# what is asked, and whether the staged copy was still there when it was
[ -e "$CHAINERMN_RT_STAGE_DIR" ] && there=present || there=absent
echo "$* $there" >> "$STUB_DIR/scontrol.log"
"""
RANKS = """
import json, os, sys, time
from chainermn_rt.staging import local_path
out = os.environ["STUB_DIR"]
path = local_path(sys.argv[1])
with open(os.path.join(out, "ranks.log"), "a") as f:
    f.write(json.dumps([path, sorted(os.listdir(path))]) + "\\n")
if os.environ.get("STUB_WAIT_FOR_STOP"):
    open(os.path.join(out, "started"), "w").close()
    stop = os.environ["CHAINERMN_RT_STOP_FILE"]
    while not os.path.exists(stop):
        time.sleep(0.05)
    open(stop + ".done", "w").write("/out/snapshots/iter_000000001\\n")
sys.exit(int(os.environ.get("STUB_EXIT", "0")))
"""


def _run_script(tmp_path: Path, source: Path, env: dict[str, str] = (),
                send_stop: bool = False) -> subprocess.CompletedProcess:
    site = replace(SANDBOX, partitions=tuple(
        replace(p, local_scratch=str(tmp_path / "scratch")) for p in SANDBOX.partitions))
    (tmp_path / "scratch").mkdir(exist_ok=True)
    (tmp_path / "ranks.py").write_text(RANKS)
    plan = make_plan(site, Request(nodes=1, python=PYTHON, stage=(str(source),),
                                   command=(PYTHON, str(tmp_path / "ranks.py"), str(source))))
    script = write_script(plan, tmp_path / "job.sh")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, text in (("srun", SRUN), ("squeue", SQUEUE), ("scontrol", SCONTROL)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_DIR": str(tmp_path), "SLURM_JOB_ID": "77",
           "PYTHONPATH": str(REPO), **dict(env)}
    with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
        proc = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env, stdout=out,
                                stderr=err, start_new_session=True)
        try:
            if send_stop:
                deadline = time.monotonic() + 60
                while not (tmp_path / "started").exists():
                    assert time.monotonic() < deadline and proc.poll() is None
                    time.sleep(0.05)
                proc.send_signal(signal.SIGUSR2)
            proc.wait(timeout=120)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the stop trap's delayed kill, if left
            except ProcessLookupError:
                pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, (tmp_path / "out").read_text(),
                                       (tmp_path / "err").read_text())


def _ranks_saw(tmp_path: Path) -> list:
    return [json.loads(line) for line in (tmp_path / "ranks.log").read_text().splitlines()]


@pytest.mark.parametrize("exit_status", [0, 3])
def test_the_script_stages_before_the_ranks_and_removes_after_them(tmp_path, exit_status):
    source = tmp_path / "data"
    _shards(source)
    proc = _run_script(tmp_path, source, {"STUB_EXIT": str(exit_status)})
    assert proc.returncode == exit_status, proc.stderr  # the ranks' status, kept
    folder = tmp_path / "scratch" / f"{FOLDER_PREFIX}77"
    assert _ranks_saw(tmp_path) == [[str(folder / "0"), ["manifest.json", shard_name(0),
                                                         shard_name(1), shard_name(2)]]]
    steps = (tmp_path / "steps.log").read_text().splitlines()
    assert steps[0] == f"{PYTHON} -m chainermn_rt data stage --job"
    assert steps[-1] == f"rm -rf -- {folder}"
    assert not folder.exists() and list((tmp_path / "scratch").iterdir()) == []


def test_a_failing_copy_ends_the_job_with_one_line_and_leaves_nothing(tmp_path):
    source = tmp_path / "data"
    manifest = _shards(source)
    (source / manifest.shards[2].name).write_bytes(b"\0" * 1536)
    proc = _run_script(tmp_path, source)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("chainermn-rt data: error: SRC: ") == 1, proc.stderr
    assert f"{manifest.shards[2].name}: sha256 " in proc.stderr
    assert not (tmp_path / "ranks.log").exists()  # no rank started
    assert list((tmp_path / "scratch").iterdir()) == []


def test_a_requeue_on_the_stop_signal_removes_the_copy_first(tmp_path):
    source = tmp_path / "data"
    _shards(source)
    proc = _run_script(tmp_path, source, {"STUB_WAIT_FOR_STOP": "1"}, send_stop=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "scontrol.log").read_text() == "requeue 77 absent\n"
    assert list((tmp_path / "scratch").iterdir()) == []
    steps = (tmp_path / "steps.log").read_text().splitlines()
    assert sum(s.startswith("rm -rf -- ") for s in steps) == 1  # once, not again at the exit


def test_the_copy_step_sweeps_what_a_killed_job_left(tmp_path):
    source = tmp_path / "data"
    _shards(source)
    stale = tmp_path / "scratch" / f"{FOLDER_PREFIX}70"
    listed = tmp_path / "scratch" / f"{FOLDER_PREFIX}5"  # squeue's stub lists 5
    old = time.time() - STALE_AFTER_S - 60
    for folder in (stale, listed):
        (folder / "0").mkdir(parents=True)
        os.utime(folder, (old, old))
    proc = _run_script(tmp_path, source)
    assert proc.returncode == 0, proc.stderr
    assert f"removed {stale}, left by job 70, which Slurm no longer lists" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "scratch").iterdir()) == [listed.name]

