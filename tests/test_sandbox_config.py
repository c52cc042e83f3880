"""The sandbox's generated configuration and its [sandbox] settings (no Slurm needed)."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.sandbox.config import render_files
from chainermn_rt.sandbox.records import FinalState, parse_line, read_records, result
from chainermn_rt.sandbox.settings import sandbox_settings
from chainermn_rt.site import load_site, resolve_site

from conftest import PYTHON, REPO, require_commands

SITE = load_site(resolve_site("sandbox"))


def conf(files: dict[str, str], name: str = "etc/slurm.conf") -> list[str]:
    return [line for line in files[name].splitlines() if line and not line.startswith("#")]


def with_sandbox(**fields):
    return dataclasses.replace(SITE, sandbox={**SITE.sandbox, **fields})


def test_slurm_conf_from_the_profile(tmp_path):
    files = render_files(SITE, sandbox_settings(SITE, state_dir=tmp_path), "netns")
    lines = conf(files)
    for setting in ("MpiDefault=pmix", "EnforcePartLimits=ALL", "JobCompType=jobcomp/filetxt",
                    "SelectType=select/cons_tres", "GresTypes=gpu", f"TmpFS={tmp_path}/tmp/%n",
                    "SlurmctldHost=head(10.213.0.1)", "ClusterName=sandbox"):
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


def test_node_count_and_subnet_come_from_settings(tmp_path):
    site = with_sandbox(subnet="172.30.8.0/28")
    files = render_files(site, sandbox_settings(site, nodes=4, state_dir=tmp_path), "netns")
    nodes = [ln.split()[2] for ln in conf(files) if ln.startswith("NodeName=")]
    assert nodes == [f"NodeAddr=172.30.8.{i + 1}" for i in range(1, 5)]
    assert "Nodes=node[1-4] MaxNodes=2" in files["etc/slurm.conf"]  # the partition's own limit


def test_loopback_mode_uses_ports_and_tcp_only(tmp_path):
    files = render_files(SITE, sandbox_settings(SITE, nodes=3, state_dir=tmp_path), "loopback")
    nodes = [ln for ln in conf(files) if ln.startswith("NodeName=")]
    assert [ln.split()[1:4] for ln in nodes] == [
        ["NodeHostname=localhost", "NodeAddr=127.0.0.1", f"Port={6817 + i}"] for i in (1, 2, 3)]
    assert "SlurmctldHost=localhost(127.0.0.1)" in conf(files)
    assert "export OMPI_MCA_btl=self,tcp" in files["etc/task_prolog.sh"]
    assert "etc/hosts" not in files and "nsenter" not in files["bin/sbatch"]


def test_generated_shell_passes_shellcheck(tmp_path):
    require_commands("shellcheck")
    settings = sandbox_settings(SITE, state_dir=tmp_path / "a b")
    files = render_files(SITE, settings, "netns", 4026531840)
    for name in ("bin/sbatch", "etc/task_prolog.sh", "env.sh"):
        path = tmp_path / name.replace("/", "_")
        path.write_text(files[name])
        proc = subprocess.run(["shellcheck", "-s", "sh", str(path)], check=False,
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{name}:\n{proc.stdout}"


@pytest.mark.parametrize("fields, nodes, message", [
    ({"subnet": "8.8.8.0/24"}, None,
     "sandbox.subnet: '8.8.8.0/24' is not allowed; allowed: a private"),
    ({"subnet": "10.0.0.0/8"}, None, "sandbox.subnet"),
    ({"subnet": "10.1.2.3/24"}, None, "sandbox.subnet"),
    ({"subnet": "10.0.0.0/29"}, None, "sandbox.subnet: '10.0.0.0/29' is not allowed"),
    ({"prefix": "Bad-Name"}, None, "sandbox.prefix: 'Bad-Name' is not allowed"),
    ({"nodes": 9}, None, "sandbox.nodes: 9 is not allowed; allowed: 1-8"),
    ({}, 0, "--nodes: 0 is not allowed; allowed: 1-8"),
    ({"slurmd_port": 80}, None, "sandbox.slurmd_port: 80 is not allowed; allowed: 1024-65000"),
    ({"subnett": "10.0.0.0/24"}, None, "sandbox.subnett: unknown field; allowed: subnet,"),
])
def test_bad_settings_name_the_field(fields, nodes, message):
    with pytest.raises(UserError) as err:
        sandbox_settings(with_sandbox(**fields), nodes=nodes)
    assert str(err.value).startswith(message)


def test_cli_rejects_bad_node_count_in_one_line():
    proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "sandbox", "up", "--nodes", "9"],
                          check=False, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "chainermn-rt sandbox: error: --nodes: 9 is not allowed; allowed: 1-8"]


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
    assert records[3]["Name"] == "a b" and records[3]["WorkDir"] == "/x y"
    assert result(records[3]) == FinalState("TIMEOUT", 0)
    assert result(records[4]) == ("COMPLETED", 0)  # a requeued job: the last record wins
    assert result(parse_line("JobId=5 JobState=FAILED ExitCode=2:0")) == ("FAILED", 2)
