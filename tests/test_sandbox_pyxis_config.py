"""What a pyxis sandbox profile adds to the sandbox's configuration and its nodes' command lines
(chainermn_rt/sandbox/pyxis.py; no Slurm needed): plugstack.conf, enroot's configuration on
node-local storage per user, the TaskProlog inside containers, enroot on slurmd's PATH."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.quoting import Expanding, sh_join
from chainermn_rt.sandbox import pyxis, pyxis_build
from chainermn_rt.sandbox.config import render_files
from chainermn_rt.sandbox.settings import sandbox_settings
from chainermn_rt.sandbox.stacks import Launcher
from chainermn_rt.site import checkout, load_site, resolve_site

SITE = load_site(resolve_site("sandbox-pyxis"))
LOCAL = "/tmp/chainermn-rt-sandbox-scratch"


@pytest.fixture
def tools(tmp_path) -> pyxis_build.Tools:
    """An install's layout (its files' contents do not matter here)."""
    t = pyxis_build.Tools(tmp_path / "tools")
    for rel in ("hooks.d/10-shadow.sh", "mounts.d/10-system.fstab", "environ.d/10-terminal.env",
                "enroot.conf"):
        (t.sysconf / rel).parent.mkdir(parents=True, exist_ok=True)
        (t.sysconf / rel).write_text(f"# {rel}\n")
    t.extra_hooks.mkdir(parents=True)
    (t.extra_hooks / pyxis.PMI_HOOK).write_text("# pmi\n")
    return t


def test_the_profile_is_a_pyxis_sandbox_on_the_debian12_stack(tmp_path):
    s = sandbox_settings(SITE, state_dir=tmp_path)
    assert (s.pyxis, s.stack, s.scratch) == (True, "debian12", (LOCAL,))
    assert not sandbox_settings(load_site(resolve_site("sandbox")), state_dir=tmp_path).pyxis
    assert SITE.container.image == str(checkout() / "build/images/chainermn-rt-cpu.sqfs")


def test_slurm_loads_pyxis_and_enroot_is_configured_per_node_and_user(tmp_path, tools):
    s = sandbox_settings(SITE, state_dir=tmp_path)
    files = render_files(SITE, s, launch=Launcher(s, tools=tools), users=("chainermn",))
    lines = files["etc/slurm.conf"].splitlines()
    assert f"PlugStackConfig={tmp_path}/etc/plugstack.conf" in lines
    # one path, each node's own (enroot's PMI hook reads them with %n unexpanded)
    assert {f"SlurmdSpoolDir={LOCAL}/slurm/spool", f"TmpFS={LOCAL}/slurm/tmp"} <= set(lines)
    assert files["etc/plugstack.conf"] == (
        f"required {tools.plugin} runtime_path={LOCAL}/pyxis use_squashfuse=true "
        "container_scope=job\n")
    conf = [line.split(None, 1) for line in files["etc/enroot/enroot.conf"].splitlines()
            if not line.startswith("#")]
    assert conf == [["ENROOT_SQUASH_OPTIONS", f"'{pyxis.SQUASH_OPTIONS}'"],
                    ["ENROOT_TEMP_PATH", f"{LOCAL}/enroot/tmp"]] + [
        [f"ENROOT_{what.upper()}_PATH", f"{LOCAL}/enroot/{what}/user-${{UID}}"]
        for what in ("runtime", "cache", "data")]
    # bash reads it as enroot does (each value through `eval echo`): one folder per user
    said = subprocess.run(["bash", "-c", 'while IFS=$\' \\t=\' read -r key value; do '
                           '[[ $key =~ ^ENROOT_ ]] && echo "$key=$(eval echo "$value")"; '
                           'done < "$0"', str(_write(tmp_path, files["etc/enroot/enroot.conf"]))],
                          capture_output=True, text=True, check=True).stdout.split()
    uid = subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip()
    assert f"ENROOT_DATA_PATH={LOCAL}/enroot/data/user-{uid}" in said
    assert "ENROOT_SQUASH_OPTIONS=-noI" in said  # the import's SquashFS, uncompressed
    # the install's configuration, the PMI hook enabled, the TaskProlog in every container
    assert {k for k in files if k.startswith("etc/enroot/")} == {
        "etc/enroot/enroot.conf", "etc/enroot/hooks.d/10-shadow.sh",
        "etc/enroot/mounts.d/10-system.fstab", "etc/enroot/environ.d/10-terminal.env",
        f"etc/enroot/hooks.d/{pyxis.PMI_HOOK}", f"etc/enroot/{pyxis.MOUNTS}"}
    prolog = f"{tmp_path}/etc/task_prolog.sh"
    assert files[f"etc/enroot/{pyxis.MOUNTS}"].splitlines()[1:] == [
        f"{prolog} {prolog} none x-create=file,bind,ro,nosuid,nodev,private 0 -1"]
    assert "User - 'chainermn':DefaultAccount='chainermn'" in files["etc/accounts.cfg"]


def _write(folder: Path, text: str) -> Path:
    path = folder / "enroot.conf"
    path.write_text(text)
    return path


def test_each_node_binds_the_sandboxs_enroot_configuration_and_finds_enroot(tmp_path, tools):
    s = sandbox_settings(SITE, state_dir=tmp_path)
    argv = Launcher(s, tools=tools).node("node2")
    bind = ["sh", "-c", 'mount --bind "$0" "$1" && shift && exec "$@"',
            f"{tmp_path}/etc/enroot", str(tools.sysconf)]
    at = argv.index(f"{tmp_path}/etc/enroot") - 3
    assert argv[at:at + 5] == bind
    assert argv[-2:] == ["env", f"PATH={tools.bin}:{pyxis.PATH}"]
    assert f"{tmp_path}/dev/fuse" not in argv  # none made: the host's /dev/fuse
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "fuse").touch()  # `up` makes a 0666 device node there
    argv = Launcher(s, tools=tools).node("node2")
    at = argv.index(f"{tmp_path}/dev/fuse") - 3
    assert argv[at:at + 5] == ["sh", "-c", 'mount --bind "$0" "$1" && shift && exec "$@"',
                               f"{tmp_path}/dev/fuse", "/dev/fuse"]
    # enroot in /usr/local/bin too, where pyxis's job epilog looks (the host's programs stay)
    assert argv[at + 5:at + 11] == ["sh", "-c", pyxis.OVERLAY, str(tools.bin),
                                    "/usr/local/bin", "env"]
    assert f"{tmp_path}/scratch/node2" in argv[:at]  # after the node's own scratch is mounted
    plain = Launcher(sandbox_settings(load_site(resolve_site("sandbox")), state_dir=tmp_path))
    assert not any("enroot" in word for word in plain.node("node2"))


def test_a_pyxis_sandbox_needs_local_scratch_and_plain_paths(tmp_path, tools):
    text = resolve_site("sandbox-pyxis").read_text().replace(
        f'local_scratch = "{LOCAL}"\n', "")
    (tmp_path / "p.toml").write_text(text)
    s = sandbox_settings(load_site(tmp_path / "p.toml"), state_dir=tmp_path)
    with pytest.raises(UserError, match=r"^local_scratch: a sandbox with pyxis needs one"):
        pyxis.files(s, tools)
    blank = sandbox_settings(SITE, state_dir=tmp_path / "a b")
    with pytest.raises(UserError, match=r"^the sandbox's state folder: '.*a b/etc/task_prolog"
                                        r"\.sh' is not allowed here; allowed: letters"):
        pyxis.files(blank, tools)


def test_the_jobs_srun_runs_the_ranks_in_the_image_with_tmp(tmp_path):
    plan = make_plan(SITE, Request(nodes=2, command=("python3", "/tmp/x.py")))
    assert sh_join(plan.launch[-5:]) == sh_join((
        f"--container-image={SITE.container.image}",
        Expanding(("--container-mounts=/tmp:/tmp,", "PWD", "")),
        Expanding(("--container-workdir=", "PWD", "")),
        "--container-env=OMPI_MCA_pml,OMPI_MCA_btl,OMPI_MCA_mpi_yield_when_idle,"
        "OMPI_ALLOW_RUN_AS_ROOT,OMPI_ALLOW_RUN_AS_ROOT_CONFIRM,CHAINERMN_RT_SLOTS,"
        "CHAINERMN_RT_STOP_FILE", "--no-container-mount-home"))
    assert plan.container == ()


def test_the_debian13_nodes_get_the_dockerd_that_docker_host_names(tmp_path, tools):
    """``up`` records DOCKER_HOST's socket (a socket here, ``unix://`` only); each debian13
    node binds it at /run/docker.sock, where the root's docker CLI looks (enroot import
    dockerd://)."""
    import socket

    from chainermn_rt.sandbox.root import Root, load_pins
    path = tmp_path / "d.sock"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))
        assert pyxis.docker_socket({"DOCKER_HOST": f"unix://{path}"}) == path
        assert pyxis.docker_socket({"DOCKER_HOST": f"unix://{tmp_path}"}) is None  # a folder
        assert pyxis.docker_socket({"DOCKER_HOST": "tcp://127.0.0.1:2375"}) is None
        assert pyxis.docker_socket({}) is None
    s = sandbox_settings(load_site(resolve_site("sandbox-pyxis-debian13")), state_dir=tmp_path)
    root = Root(tmp_path / "root", load_pins())
    argv = Launcher(s, root=root, tools=tools, docker=path).node("node1")
    at = argv.index(str(path))
    assert argv[at:at + 2] == [str(path), "/run/docker.sock"]
    assert str(path) not in Launcher(s, root=root, tools=tools).node("node1")
