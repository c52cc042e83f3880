"""The sandbox's generated configuration and its [sandbox] settings (no Slurm needed)."""

from __future__ import annotations

import os
import subprocess

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.sandbox import netns
from chainermn_rt.sandbox.config import render_files
from chainermn_rt.sandbox.records import read_records, result
from chainermn_rt.sandbox.settings import STATE_VAR, default_state_dir, prefix_for, sandbox_settings
from chainermn_rt.site import load_site, resolve_site
from chainermn_rt.slurm_client import FinalState
from chainermn_rt.slurm_records import record

from conftest import PYTHON, REPO, require_commands

SITE_PATH = resolve_site("sandbox")
SITE = load_site(SITE_PATH)


def conf(files: dict[str, str], name: str = "etc/slurm.conf") -> list[str]:
    return [line for line in files[name].splitlines() if line and not line.startswith("#")]


def with_sandbox(tmp_path, table: str):
    """The shipped sandbox profile with its [sandbox] table replaced by ``table``."""
    text = SITE_PATH.read_text()
    path = tmp_path / "site.toml"
    path.write_text(text[:text.index("[sandbox]")] + "[sandbox]\n" + table + "\n")
    return load_site(path)


def test_slurm_conf_from_the_profile(tmp_path):
    files = render_files(SITE, sandbox_settings(SITE, state_dir=tmp_path))
    lines = conf(files)
    for setting in ("MpiDefault=pmix", "EnforcePartLimits=ALL", "JobCompType=jobcomp/filetxt",
                    "SelectType=select/cons_tres", "GresTypes=gpu", f"TmpFS={tmp_path}/tmp/%n",
                    "SlurmctldHost=head(10.213.0.1)", "ClusterName=sandbox",
                    "TaskPlugin=task/cgroup"):
        assert setting in lines
    assert [ln for ln in lines if ln.startswith("NodeName=")] == [
        f"NodeName=node{i} NodeHostname=node{i} NodeAddr=10.213.0.{i + 1} CPUs=4 "
        "RealMemory=2048 Gres=gpu:4 State=UNKNOWN" for i in (1, 2)]
    assert [ln for ln in lines if ln.startswith("PartitionName=")] == [
        "PartitionName=gpu Nodes=node[1-2] MaxNodes=2 MaxTime=00:30:00 Default=YES State=UP",
        "PartitionName=cpu Nodes=node[1-2] MaxNodes=2 MaxTime=00:30:00 Default=NO State=UP"]
    assert conf(files, "etc/gres.conf") == [
        "AutoDetect=off", f"Name=gpu File={tmp_path}/dev/fakegpu[0-3]"]
    assert files["etc/hosts"].splitlines()[-2:] == ["10.213.0.2 node1", "10.213.0.3 node2"]
    assert "OMPI_MCA_btl_tcp_if_include=10.213.0.0/24" in files["etc/task_prolog.sh"]
    assert conf(files, "etc/mpi.conf") == ["PMIxTimeout=900"]
    # task/cgroup binds and constrains nothing (each rank binds itself): no cgroup is made
    assert {"ConstrainCores=no", "ConstrainDevices=no", "ConstrainRAMSpace=no"} <= \
        set(conf(files, "etc/cgroup.conf"))


def test_accounting_settings_and_accounts_from_the_profile(tmp_path):
    """With accounting (the default): slurmdbd's configuration, the accounts and QOS, the
    preemption settings; without it, none of them."""
    files = render_files(SITE, sandbox_settings(SITE, state_dir=tmp_path))
    lines = conf(files)
    for setting in ("AccountingStorageType=accounting_storage/slurmdbd",
                    f"AccountingStoragePass={tmp_path}/munge/munge.socket",
                    "AccountingStorageEnforce=associations,limits,qos", "PreemptType=preempt/qos",
                    "PreemptMode=REQUEUE", "SlurmctldParameters=preempt_send_user_signal"):
        assert setting in lines
    assert {"DbdHost=head", "DbdAddr=10.213.0.1", "StorageType=accounting_storage/mysql"} \
        <= set(conf(files, "etc/slurmdbd.conf"))
    assert "Account - 'chainermn':" in files["etc/accounts.cfg"]
    assert files["etc/accounts.sacctmgr"].startswith("add qos low GraceTime=60 ")
    off = with_sandbox(tmp_path, "accounting = false")
    files = render_files(off, sandbox_settings(off, state_dir=tmp_path))
    assert "AccountingStorageType=accounting_storage/none" in conf(files)
    assert not any("Preempt" in line for line in conf(files)) and "etc/slurmdbd.conf" not in files


@pytest.mark.parametrize("edit, message", [
    ('account = "chainermn"', "account: 'Big Lab' is not allowed for the sandbox's accounting; "
                              "allowed: lower-case letters"),
    ('qos = "normal"', "qos: 'urgent' is not one of the sandbox's; allowed: normal, low, high"),
])
def test_an_account_or_qos_the_sandbox_cannot_hold_is_one_line(tmp_path, edit, message):
    path = tmp_path / "site.toml"
    path.write_text(SITE_PATH.read_text().replace(edit, edit.replace("chainermn", "Big Lab")
                                                  .replace("normal", "urgent")))
    site = load_site(path)
    with pytest.raises(UserError) as err:
        render_files(site, sandbox_settings(site, state_dir=tmp_path))
    assert str(err.value).startswith(message), err.value
    up = subprocess.run([PYTHON, "-m", "chainermn_rt", "sandbox", "up", "--site", str(path),
                         "--state", str(tmp_path / "state")], capture_output=True, text=True,
                        timeout=60)
    assert (up.returncode, up.stdout) == (2, ""), up.stderr
    assert up.stderr.startswith(f"chainermn-rt sandbox: error: {message}"), up.stderr
    assert up.stderr.count("\n") == 1, up.stderr
    assert not (tmp_path / "state").exists()  # refused before anything started


def test_node_count_and_subnet_come_from_settings(tmp_path):
    site = with_sandbox(tmp_path, 'subnet = "172.30.8.0/28"')
    files = render_files(site, sandbox_settings(site, nodes=4, state_dir=tmp_path))
    nodes = [ln.split()[2] for ln in conf(files) if ln.startswith("NodeName=")]
    assert nodes == [f"NodeAddr=172.30.8.{i + 1}" for i in range(1, 5)]
    # every partition spans the sandbox's nodes, whatever the profile's partitions say (2)
    assert [ln for ln in conf(files) if ln.startswith("PartitionName=")] == [
        f"PartitionName={p} Nodes=node[1-4] MaxNodes=4 MaxTime=00:30:00 Default={d} State=UP"
        for p, d in (("gpu", "YES"), ("cpu", "NO"))]


def test_state_folder_names_the_sandbox_and_never_depends_on_the_current_folder(
        tmp_path, monkeypatch):
    monkeypatch.delenv(STATE_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_state_dir() == REPO / "build" / "sandbox"
    monkeypatch.setenv(STATE_VAR, str(tmp_path / "mine"))
    assert sandbox_settings(SITE).state_dir == tmp_path / "mine"
    a, b = (sandbox_settings(SITE, state_dir=tmp_path / n) for n in ("a", "b"))
    assert a.prefix != b.prefix and a.netns("head") != b.netns("head")
    assert a.prefix == sandbox_settings(SITE, state_dir=tmp_path / "a").prefix
    assert render_files(SITE, a)["bin/sbatch"].count(f"/run/netns/{a.netns('head')}") == 1


def test_generated_shell_passes_shellcheck(tmp_path):
    require_commands("shellcheck")
    settings = sandbox_settings(SITE, state_dir=tmp_path / "a b")
    files = render_files(SITE, settings, 4026531840)
    for name in ("bin/sbatch", "etc/task_prolog.sh", "env.sh"):
        path = tmp_path / name.replace("/", "_")
        path.write_text(files[name])
        proc = subprocess.run(["shellcheck", "-s", "sh", str(path)], check=False,
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{name}:\n{proc.stdout}"


@pytest.mark.parametrize("table, message", [
    ('subnet = "8.8.8.0/24"', "sandbox.subnet: '8.8.8.0/24' is not allowed; allowed: a private"),
    ('subnet = "10.0.0.0/8"', "sandbox.subnet"),
    ('subnet = "10.1.2.3/24"', "sandbox.subnet"),
    ('subnet = "10.0.0.0/29"', "sandbox.subnet: '10.0.0.0/29' is not allowed"),
    ("subnet = 10", "sandbox.subnet: 10 has the wrong type"),
    ("nodes = 33", "sandbox.nodes: 33 is not allowed; allowed: 1-32"),
    ("nodes = 0", "sandbox.nodes: 0 is not allowed; allowed: 1-32"),
    ("nodes = true", "sandbox.nodes: True has the wrong type; allowed: 1-32"),
    # a /28 has 16 addresses: network, broadcast, the head, 13 nodes
    ('subnet = "10.0.0.0/28"\nnodes = 14', "sandbox.nodes: 14 is not allowed; allowed: 1-13"),
    ('subnett = "10.0.0.0/24"',
     "sandbox.subnett: unknown field; allowed: accounting, hwloc_xml, nodes, stack, subnet"),
    ('stack = "debian11"', "sandbox.stack: 'debian11' is not allowed; allowed: debian12 | "
     "debian13"),
    ("stack = 13", "sandbox.stack: 13 has the wrong type; allowed: debian12 | debian13"),
    ('accounting = "yes"', "sandbox.accounting: 'yes' has the wrong type"),
    ('hwloc_xml = "no-such.xml"', "sandbox.hwloc_xml: {tmp}/no-such.xml is not a file; allowed:"
     " an hwloc XML file (lstopo --of xml), relative to the profile's folder"),
    (f'hwloc_xml = "{"x" * 1000}"', "sandbox.hwloc_xml: '{tmp}/xxxx"),  # too long to look up
    ("hwloc_xml = 1", "sandbox.hwloc_xml: 1 has the wrong type; allowed: a path to an hwloc"),
    ('prefix = "cmrtsbx"', "sandbox.prefix: unknown field"),
])
def test_bad_sandbox_table_names_the_file_and_field(tmp_path, table, message):
    """The [sandbox] table is validated with the rest of the profile, when it is loaded."""
    with pytest.raises(UserError) as err:
        with_sandbox(tmp_path, table)
    assert str(err.value).startswith(f"{tmp_path / 'site.toml'}: "
                                     + message.format(tmp=tmp_path)), err.value


def test_hwloc_xml_reaches_every_task(tmp_path):
    """``[sandbox] hwloc_xml``: the TaskProlog exports HWLOC_XMLFILE (relative to the profile)."""
    (tmp_path / "node.xml").write_text("<topology/>")
    site = with_sandbox(tmp_path, 'hwloc_xml = "node.xml"')
    prolog = render_files(site, sandbox_settings(site, state_dir=tmp_path / "s"))[
        "etc/task_prolog.sh"]
    assert f"echo 'export HWLOC_XMLFILE={tmp_path}/node.xml'" in prolog.splitlines()


def test_node_count_from_the_command_line_is_checked(tmp_path):
    with pytest.raises(UserError, match=r"^--nodes: 0 is not allowed; allowed: 1-32$"):
        sandbox_settings(SITE, nodes=0)
    assert sandbox_settings(SITE, nodes=32).node_names()[-1] == "node32"
    small = with_sandbox(tmp_path, 'subnet = "10.0.0.0/28"')
    with pytest.raises(UserError, match=r"^--nodes: 14 is not allowed; allowed: 1-13 \(the "
                       r"addresses of \[sandbox\] subnet 10.0.0.0/28\)$"):
        sandbox_settings(small, nodes=14)
    assert str(sandbox_settings(small, nodes=13).node_address(13)) == "10.0.0.14"


def test_the_stack_is_the_command_lines_else_the_profiles_else_debian12(tmp_path):
    """``sandbox up --site sandbox-debian13`` starts the debian13 stack (its ``[sandbox]
    stack``); ``--stack`` overrides a profile's."""
    debian13 = load_site(resolve_site("sandbox-debian13"))
    assert debian13.sandbox.stack == "debian13" and SITE.sandbox.stack is None
    assert sandbox_settings(debian13).stack == "debian13"
    assert sandbox_settings(debian13, stack="debian12").stack == "debian12"
    assert sandbox_settings(SITE).stack == "debian12"
    assert sandbox_settings(SITE, stack="debian13").stack == "debian13"


def test_a_profile_for_the_other_stack_says_which_to_start(tmp_path):
    """A job of sandbox-debian13 (Slurm 24.11, Apptainer) to a sandbox running the Debian 12
    stack: one line naming both stacks and the command, nothing submitted."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "sandbox.json").write_text('{"stack": "debian12", "procs": {}, "nodes": []}')
    proc = cli("submit", "--site", "sandbox-debian13", "--nodes", "1", "--", "true",
               cwd=tmp_path, env={**os.environ, STATE_VAR: str(state)})
    assert (proc.returncode, proc.stdout) == (3, ""), proc
    assert proc.stderr.splitlines() == [
        f"chainermn-rt submit: error: the sandbox in {state} runs the debian12 stack and site "
        "'sandbox-debian13' is for the debian13 stack; start that one with `chainermn-rt "
        "sandbox up --site sandbox-debian13` (it brings the other down)"]


def test_a_sandbox_profiles_relative_image_is_the_checkouts(tmp_path, monkeypatch):
    """make sif writes build/images/ in the checkout: a sandbox profile's relative image is
    there wherever the command runs; any other profile's stays as written (the cluster's
    job folder), and so does one of an installed bundle (no checkout)."""
    from chainermn_rt import site as site_module

    shipped = load_site(resolve_site("sandbox-debian13")).container
    assert (shipped.runtime, shipped.image) == (
        "apptainer", str(REPO / "build" / "images" / "chainermn-rt-cpu.sif"))
    text = resolve_site("sandbox-debian13").read_text()
    elsewhere = tmp_path / "copy.toml"
    elsewhere.write_text(text.replace('image = "build/images/chainermn-rt-cpu.sif"',
                                      'image = "x/y.sif"'))
    monkeypatch.chdir(tmp_path)
    assert load_site(elsewhere).container.image == str(REPO / "x" / "y.sif")
    cluster = tmp_path / "cluster.toml"  # the same without [sandbox]: a cluster's profile
    cluster.write_text(elsewhere.read_text()[:elsewhere.read_text().index("[sandbox]")])
    assert load_site(cluster).container.image == "x/y.sif"
    for image in ("/abs/y.sif", "docker://debian:12"):  # absolute, or not a path
        other = tmp_path / "other.toml"
        other.write_text(text.replace('"build/images/chainermn-rt-cpu.sif"', f'"{image}"'))
        assert load_site(other).container.image == image
    monkeypatch.setattr(site_module, "checkout", lambda: None)  # an installed bundle
    assert load_site(elsewhere).container.image == "x/y.sif"


def test_a_site_without_sandbox_table_is_refused():
    with pytest.raises(UserError, match=r"^--site: site 'dgx-h100' has no \[sandbox\] table"):
        sandbox_settings(load_site(resolve_site("dgx-h100")))


@pytest.mark.parametrize("value, message", [
    ("0", "0; allowed: 1-32"), ("33", "33; allowed: 1-32"),
    ("abc", "'abc'; allowed: an integer, 1-32")])
def test_cli_rejects_bad_node_count_in_one_line_and_starts_nothing(tmp_path, value, message):
    state = tmp_path / "state"
    proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "sandbox", "up", "--nodes", value,
                           "--state", str(state)],
                          check=False, capture_output=True, text=True, cwd=REPO)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "", f"chainermn-rt sandbox: error: --nodes: {message}\n")
    assert not state.exists()
    assert netns.existing(prefix_for(state)) == []


def cli(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "chainermn_rt", *args], check=False,
                          capture_output=True, text=True, timeout=60, **kwargs)


@pytest.mark.parametrize("args", [["submit", "--site", "sandbox", "--nodes", "1", "--", "true"],
                                  ["sandbox", "exec", "--", "sinfo"], ["sandbox", "env"]])
def test_commands_on_a_sandbox_that_is_not_up_say_how_to_start_it(tmp_path, args):
    proc = cli(*args, cwd=tmp_path, env={**os.environ, STATE_VAR: str(tmp_path / "none")})
    assert proc.returncode == 3, proc
    assert proc.stderr.splitlines() == [
        f"chainermn-rt {args[0]}: error: the sandbox of {SITE_PATH} is not up "
        f"({tmp_path / 'none'}); start it with `chainermn-rt sandbox up`"]
    assert list(tmp_path.iterdir()) == []


def test_site_check_live_where_slurm_does_not_answer_is_one_line(tmp_path):
    require_commands("scontrol")
    (tmp_path / "slurm.conf").write_text("")  # scontrol refuses it at once
    proc = cli("site", "check", "dgx-h100", "--live",
               env={**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf")})
    assert proc.returncode == 3, proc
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("chainermn-rt site: error: scontrol show partition -o failed "
                                  "(exit 1): scontrol: fatal: Unable to process"), proc.stderr


def test_status_of_a_folder_without_sandbox_is_down(tmp_path):
    proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "sandbox", "status", "--state",
                           str(tmp_path)], check=False, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 3 and proc.stdout.startswith("sandbox: down"), proc


def test_job_records(tmp_path):
    path = tmp_path / "jobcomp.txt"
    path.write_text(
        "JobId=3 UserId=root(0) Name=a b JobState=TIMEOUT WorkDir=/x y ExitCode=0:0 \n"
        "JobId=4 UserId=root(0) Name=c JobState=FAILED DerivedExitCode=0:15 ExitCode=3:0\n"
        "JobId=4 UserId=root(0) Name=c JobState=COMPLETED DerivedExitCode=0:0 ExitCode=0:0\n")
    records = read_records(path)
    assert records["3"]["Name"] == "a b" and records["3"]["WorkDir"] == "/x y"
    assert result(records["3"]) == FinalState("TIMEOUT", 0)
    assert result(records["4"]) == ("COMPLETED", 0)  # a requeued job: the last record wins
    assert result(record("JobId=5 JobState=FAILED ExitCode=2:0")) == ("FAILED", 2)


def test_a_daemon_gets_none_of_the_callers_descriptors(tmp_path):
    """A descriptor the caller inherited (``flock FILE make sandbox-up``'s lock) is not passed
    on: a daemon holding it would hold the lock for the sandbox's life."""
    from chainermn_rt.sandbox import processes

    lock_path = tmp_path / "lock"
    with open(lock_path, "w") as lock:
        os.set_inheritable(lock.fileno(), True)
        proc = processes.spawn(["sleep", "30"], tmp_path / "log", dict(os.environ))
        try:
            fds = f"/proc/{proc['pid']}/fd"
            # what the daemon holds (not fd numbers: another thread of this test process, an
            # MPI library's, may open a descriptor of its own while the daemon starts); one
            # gone between the listing and its reading was the daemon's own, briefly (its
            # loader's and locale's files: the suite once met /proc/PID/fd/3 gone)
            held = set()
            for fd in os.listdir(fds):
                try:
                    held.add(os.readlink(f"{fds}/{fd}"))
                except FileNotFoundError:
                    pass
            assert str(lock_path) not in held and str(tmp_path / "log") in held, held
        finally:
            processes.stop([proc], grace=1)
