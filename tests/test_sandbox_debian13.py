"""The sandbox on the debian13 stack for real: Slurm 24.11's daemons from the Debian 13 root in
the sandbox's namespaces, accounting and QOS, PMIx 5 with the root's Open MPI 5, Apptainer 1.4.5
as root and as an unprivileged user, and the CLI's life cycle without repeating --stack."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from chainermn_rt.sandbox import Sandbox, netns, processes
from chainermn_rt.sandbox.root import load_pins, run_in_root

from conftest import PYTHON
from fixtures_sandbox import job_output, submit_text, user_folder

pytestmark = [pytest.mark.slurm, pytest.mark.debian13]

HELLO = """\
import socket
from mpi4py import MPI
comm = MPI.COMM_WORLD
row = f"{comm.rank} {comm.size} {socket.gethostname()} {MPI.Get_library_version().split(',')[0]}"
rows = comm.gather(row)
if comm.rank == 0:
    print("\\n".join(rows), flush=True)
"""


def finished(sb: Sandbox, text: str, args: list[str] = ()) -> str:
    job = submit_text(sb, text, list(args))
    state = sb.slurm.wait(job, timeout=300, poll=0.5)
    out = job_output(sb, job)
    assert state == ("COMPLETED", 0), f"job {job}: {state}\n{out}"
    return out


def test_two_nodes_of_slurm_24_11(sandbox_debian13):
    sb = sandbox_debian13
    out = finished(sb, "#!/bin/sh\nsrun -N2 hostname\nsrun --version\nsrun --mpi=list\n",
                   ["--nodes=2"])
    lines = out.splitlines()
    assert sorted(lines[:2]) == ["node1", "node2"]
    assert lines[2] == "slurm-wlm 24.11.5"
    assert "pmix" in [line.strip() for line in lines] and "pmix_v5" in out
    config = sb.slurm.run(["scontrol", "show", "config"]).stdout
    assert "SLURM_VERSION           = 24.11.5" in config


def test_accounting_and_qos_on_slurm_24_11(sandbox_debian13):
    sb = sandbox_debian13
    qos = sb.slurm.run(["sacctmgr", "-n", "-P", "show", "qos", "format=name,preempt"]).stdout
    assert qos.split() == ["normal|", "low|", "high|low"]
    job = submit_text(sb, "#!/bin/sh\ntrue\n", ["--qos=low"])
    assert sb.slurm.wait(job, timeout=120, poll=0.5) == ("COMPLETED", 0)
    said = sb.slurm.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "jobid,state,qos"]).stdout
    assert said.split() == [f"{job}|COMPLETED|low"]
    refused = sb.slurm.run(["sbatch", "--qos=nosuch", "--wrap=true"])
    assert refused.returncode != 0 and "Invalid qos" in refused.stderr


def test_mpi4py_ranks_use_open_mpi_5_over_pmix_5(sandbox_debian13, tmp_path):
    script = tmp_path / "hello.py"
    script.write_text(HELLO)
    out = finished(sandbox_debian13, f"#!/bin/sh\nsrun --mpi=pmix -N2 -n4 /usr/bin/python3 "
                                     f"{script}\n", ["--nodes=2", "--ntasks=4"])
    rows = sorted(line.split(maxsplit=3) for line in out.splitlines())
    assert [r[:2] for r in rows] == [["0", "4"], ["1", "4"], ["2", "4"], ["3", "4"]]
    assert {r[2] for r in rows} == {"node1", "node2"}
    assert {r[3] for r in rows} == {"Open MPI v5.0.7"}


def tiny_sif(root, folder):
    """A SIF of a shell and its C library, built by the root's Apptainer (under a second)."""
    tree = folder / "tree"
    for name, rel in (("usr/bin/dash", "bin/sh"),
                      ("usr/lib/x86_64-linux-gnu/libc.so.6", "lib/x86_64-linux-gnu/libc.so.6"),
                      ("usr/lib64/ld-linux-x86-64.so.2", "lib64/ld-linux-x86-64.so.2")):
        target = tree / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root.rootfs / name, target)
    sif = folder / "tiny.sif"
    proc = run_in_root(root, ["apptainer", "build", str(sif), str(tree)], binds=[folder],
                       capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sif.chmod(0o644)
    return sif


def test_apptainer_runs_a_sif_on_the_nodes_as_root_and_as_a_user(sandbox_debian13,
                                                                 debian13_root):
    """As root Apptainer mounts the SIF on a loop device; as a user through squashfuse, on the
    nodes' own /dev/fuse that every user may open (the host's stays 0600)."""
    sif = tiny_sif(debian13_root, user_folder(sandbox_debian13, "sif"))
    step = f"srun -N2 apptainer exec {sif} /bin/sh -c 'echo in the image: ok'"
    as_root = finished(sandbox_debian13, f"#!/bin/sh\nid -u\n{step}\n", ["--nodes=2"])
    user = load_pins().user
    as_user = finished(sandbox_debian13, f"#!/bin/sh\nid -u\n{step}\n",
                       ["--nodes=2", f"--uid={user}", f"--gid={user}"])
    assert as_root.splitlines()[0] == "0"
    assert as_user.splitlines()[0] == str(load_pins().uid)
    for out in (as_root, as_user):
        assert sum(line.endswith("ok") for line in out.splitlines()) == 2, out


def test_client_commands_run_through_the_root(sandbox_debian13):
    env_sh = sandbox_debian13.state_dir / "env.sh"
    proc = subprocess.run(["sh", "-c", f". {env_sh} && sinfo --version && sacct --version"],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.stdout.splitlines() == ["slurm-wlm 24.11.5"] * 2, proc.stderr
    assert shutil.which("sinfo") is None or subprocess.run(
        ["sinfo", "--version"], capture_output=True, text=True).stdout != "slurm-wlm 24.11.5\n"


def cli(*args: str, state) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "chainermn_rt", "sandbox", *args, "--state", str(state)],
                          capture_output=True, text=True, check=False, timeout=300)


def test_cli_status_up_and_down_find_the_stack_in_the_state_folder(debian13_root, tmp_path):
    state = tmp_path / "state"
    up = cli("up", "--stack", "debian13", "--nodes", "1", state=state)
    assert up.returncode == 0, up.stdout + up.stderr
    record = json.loads((state / "sandbox.json").read_text())
    assert record["stack"] == "debian13" and record["root"] == str(debian13_root.folder)
    status = cli("status", state=state)
    assert status.returncode == 0 and "  stack: debian13 (the root" in status.stdout
    again = cli("up", state=state)  # no --stack: the one up there
    assert again.stdout.startswith("sandbox already up")
    sb = Sandbox.from_profile(state_dir=state)
    assert sb.settings.stack == "debian13"
    namespaces = netns.existing(sb.settings.prefix)
    assert namespaces, "no namespace"
    down = cli("down", state=state)
    assert down.returncode == 0, down.stdout + down.stderr
    assert netns.existing(sb.settings.prefix) == []
    assert not any(processes.alive(p) for p in record["procs"].values())
    assert not (state / "sandbox.json").exists()


def test_cli_an_unknown_stack_is_one_line_and_starts_nothing(tmp_path):
    proc = cli("up", "--stack", "debian11", state=tmp_path / "state")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "chainermn-rt sandbox: error: --stack: invalid choice: 'debian11' (choose from "
        "'debian12', 'debian13')"]
    assert not (tmp_path / "state").exists()


def test_site_init_profiles_slurm_24_11_and_site_check_live_agrees(sandbox_debian13, tmp_path):
    out = tmp_path / "found.toml"
    init = subprocess.run([PYTHON, "-m", "chainermn_rt", "site", "init", "--partition", "gpu",
                           "--output", str(out)], env=sandbox_debian13.env(),
                          capture_output=True, text=True, check=False, timeout=300)
    assert init.returncode == 0, init.stdout + init.stderr
    text = out.read_text()
    assert "# srun --mpi=list: none, pmix, cray_shasta, pmi2" in text  # 24.11's order
    assert "found: apptainer, singularity" in text  # the root's nodes have Apptainer
    assert 'slurm_version = "24.11"' in text  # the profile's Slurm decides (slurm_rules)
    state = sandbox_debian13.state_dir
    assert f'slurm_tmpfs = "{state}/tmp/%n"   # scontrol show config: TmpFS' in text
    assert f'slurmd_spool_dir = "{state}/spool/%n"' in text
    live = subprocess.run([PYTHON, "-m", "chainermn_rt", "site", "check", str(out), "--live"],
                          env=sandbox_debian13.env(), capture_output=True, text=True,
                          check=False, timeout=300)
    assert live.stdout.splitlines()[-1] == "live: matches the cluster", live.stdout + live.stderr
