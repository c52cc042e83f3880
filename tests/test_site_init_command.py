"""``chainermn-rt site init`` against stub ``scontrol`` and ``srun`` (no Slurm): the stub srun
runs the real probe script here, with the real lstopo reading a handwritten hwloc XML
(``HWLOC_XMLFILE``), so what differs from a cluster is only who answers the questions.
tests/test_site_init_sandbox.py asks the real Slurm of the sandbox."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from hwloc_fixtures import GPU_BUSIDS, dgx_h100

from chainermn_rt.runtimes.enroot_probe import EnrootReport
from chainermn_rt.site import load_site, parse_site

from conftest import REPO, folder_contents, require_commands

EMPTY_ENROOT = EnrootReport({}, (), ())

CONFIG = ("AccountingStorageType   = accounting_storage/slurmdbd\nClusterName         = dgx\n"
          "SlurmctldHost[0]    = head(10.0.0.1)\nMpiDefault = pmix\n"
          "SLURM_VERSION           = 23.11.10\nSlurmdSpoolDir          = /var/spool/slurmd\n"
          "TmpFS                   = /local/%n/tmp\n")
PARTITIONS = ("PartitionName=batch AllowGroups=ALL Default=YES MaxTime=2-00:00:00 "
              "Nodes=dgx[01-02] State=UP TotalCPUs=224 TotalNodes=2\n"
              "PartitionName=debug Default=NO MaxTime=UNLIMITED Nodes=dgx03 TotalNodes=1\n"
              "PartitionName=mixed Default=NO MaxTime=1:00:00 Nodes=dgx[01-03] TotalNodes=3\n")
NODE = ("NodeName={name} Arch=x86_64 CPUTot={cpus} Gres=gpu:h100:8(S:0-1) RealMemory=1945600 "
        "State={state} OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian\n")
NODES = (NODE.format(name="dgx01", cpus=112, state="IDLE+DRAIN")
         + NODE.format(name="dgx02", cpus=112, state="IDLE")
         + NODE.format(name="dgx03", cpus=224, state="IDLE"))
MPI_LIST = ("MPI plugin types are...\n\tcray_shasta\n\tnone\n\tpmi2\n\tpmix\n"
            "specific pmix plugin versions available: pmix_v4\n")
SCONTROL = """#!/bin/sh
echo "scontrol $*" >> "$STUB/calls"
case "$*" in
  "show config") cat "$STUB/config" ;;
  "show partition -o") cat "$STUB/partitions" ;;
  "show node -o") cat "$STUB/nodes" ;;
  "show hostnames dgx[01-02]") printf 'dgx01\\ndgx02\\n' ;;
  "show hostnames dgx03") echo dgx03 ;;
  "show hostnames dgx[01-03]") printf 'dgx01\\ndgx02\\ndgx03\\n' ;;
  *) echo "scontrol: unexpected $*" >&2; exit 1 ;;
esac
"""
# srun: canned answers, else a step: everything from the command (`sh`) on runs here
SRUN = """#!/bin/sh
echo "srun $*" >> "$STUB/calls"
case "$1" in
  --mpi=list) cat "$STUB/mpi-list"; exit 0 ;;
  --help) cat "$STUB/help"; exit 0 ;;
esac
while [ "$1" != sh ]; do shift; done
exec "$@"
"""


def _stubs(tmp_path: Path, pyxis: bool = False) -> dict[str, str]:
    require_commands("lstopo")
    stub = tmp_path / "stub"
    (stub / "bin").mkdir(parents=True)
    for name, text in (("scontrol", SCONTROL), ("srun", SRUN)):
        (stub / "bin" / name).write_text(text)
        (stub / "bin" / name).chmod(0o755)
    for name, text in (("config", CONFIG), ("partitions", PARTITIONS), ("nodes", NODES),
                       ("mpi-list", MPI_LIST),
                       ("help", "  --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH\n"
                        if pyxis else "  --mpi=MPI_TYPE\n")):
        (stub / name).write_text(text)
    (stub / "dgx.xml").write_text(dgx_h100())
    return {**os.environ, "PATH": f"{stub / 'bin'}:/usr/bin:/bin", "STUB": str(stub),
            "HWLOC_XMLFILE": str(stub / "dgx.xml")}


def _init(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chainermn_rt", "site", "init", *args],
                          env=env, capture_output=True, text=True, timeout=120)


def test_a_dgx_cluster_gives_the_shipped_dgx_profiles_slots(tmp_path):
    env = _stubs(tmp_path)
    out = tmp_path / "dgx.toml"
    proc = _init(env, "--partition", "batch", "--partition", "debug", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    site = load_site(out)
    shipped = load_site(REPO / "slurm/sites/dgx-h100.toml").partition("batch")
    batch = site.partition("batch")
    assert batch.topology.slots == shipped.topology.slots
    assert (batch.nodes, batch.max_time, batch.cpus_per_node, batch.memory_mb, batch.gpu_type,
            batch.default) == (2, "2-00:00:00", 112, shipped.memory_mb, "h100", True)
    # the two node shapes (112 and 224 CPUs) each had their probe step
    calls = (tmp_path / "stub/calls").read_text()
    assert calls.count("--exclusive") == 2 and "--nodelist=dgx02" in calls  # dgx01 drains
    assert site.partition("debug").max_time == "365-00:00:00"
    assert (site.name, site.launcher, site.srun_mpi, site.container.runtime,
            site.slurm_version) == ("dgx", "srun", "pmix", "none", "23.11")
    # where Slurm's PMIx plugin gives the ranks their folders (plan: bound into containers)
    assert (site.slurm_tmpfs, site.slurmd_spool_dir) == ("/local/%n/tmp", "/var/spool/slurmd")
    text = out.read_text()
    assert f"# {GPU_BUSIDS[0]}" in text and "# [container]" in text and "# [checks]" in text
    assert proc.stdout.splitlines()[-1].startswith(f"wrote {out}: site 'dgx', partitions "
                                                   "batch, debug; 2 Slurm step(s) in ")
    warnings = [line for line in proc.stdout.splitlines() if line.startswith("warning: ")]
    assert "warning: partition debug: MaxTime is UNLIMITED; written as 365-00:00:00" in warnings
    assert "warning: dgx03: Slurm has 224 CPUs, hwloc sees 112" in warnings


def test_gpu_order_follows_the_device_minors(tmp_path, monkeypatch):
    """/proc/driver/nvidia as a node with minors 0 and 1 swapped has it (read by the parser
    here: the probe's own files cannot be faked without root on a node)."""
    from chainermn_rt.site_init import hwloc, node_report, survey

    info = "Model: \t NVIDIA H100\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"
    minors = {0: 1, 1: 0}
    report = node_report.NodeReport(
        hostname="dgx01", lstopo_xml=dgx_h100(), ib_ports=(), nvidia_smi_topo="", runtimes=(),
        enroot=EMPTY_ENROOT, socket_ifname=None, nvidia_information=tuple(
            info.format(bus=b.upper(), minor=minors.get(i, i))
            for i, b in enumerate(GPU_BUSIDS)))
    warnings: list[str] = []
    shape = survey.Shape(112, 1945600, "gpu:h100:8")
    made = survey._topology("t", "dgx01", shape, report, warnings)
    assert made.busids[:2] == (GPU_BUSIDS[1], GPU_BUSIDS[0])
    assert [s.hcas for s in made.slots[:2]] == [("mlx5_3:1",), ("mlx5_0:1",)]
    assert warnings == ["dgx01: the GPUs' device minors do not follow their PCI order (NVML's "
                        "index): the slots follow the minors, as Slurm does"]
    # a driver listing fewer GPUs than Slurm's Gres is no profile at all
    short = replace(report, nvidia_information=report.nvidia_information[:7])
    with pytest.raises(survey.JobFailed, match=r"^dgx01: Slurm has 8 GPUs \(Gres=gpu:h100:8\), "
                                               "the NVIDIA driver lists 7$"):
        survey._topology("t", "dgx01", shape, short, [])
    assert hwloc.read(report.lstopo_xml).gpus  # the fixture is what the probe would print


def test_each_hca_gets_its_active_port():
    """/sys/class/infiniband as the probe prints it: mlx5_0's port 2 is the active one; mlx5_3
    has none active (a warning, port 1 kept); HCAs the node said nothing of keep port 1."""
    from chainermn_rt.site_init import node_report, survey

    report = node_report.NodeReport(
        hostname="dgx01", lstopo_xml=dgx_h100(), nvidia_information=(), nvidia_smi_topo="",
        runtimes=(), enroot=EMPTY_ENROOT, socket_ifname=None, ib_ports=(
            ("mlx5_0", 1, "1: DOWN", "10 Gb/sec", "InfiniBand"),
            ("mlx5_0", 2, "4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand"),
            ("mlx5_3", 1, "1: DOWN", "10 Gb/sec", "InfiniBand")))
    warnings: list[str] = []
    made = survey._topology("t", "dgx01", survey.Shape(112, 1, "gpu:8"), report, warnings)
    assert [s.hcas for s in made.slots[:3]] == [("mlx5_0:2",), ("mlx5_3:1",), ("mlx5_4:1",)]
    assert "dgx01: mlx5_3, GPU 1's HCA, has no ACTIVE port" in warnings


def test_pyxis_without_enroots_pmi_hook_is_a_warning(tmp_path):
    env = _stubs(tmp_path, pyxis=True)
    fake = tmp_path / "stub" / "bin" / "enroot"  # enroot on the node, reading a site's folder
    etc = tmp_path / "site-etc"
    (etc / "hooks.d").mkdir(parents=True)
    (etc / "hooks.d" / "50-slurm-pmi.sh").write_text("#!/bin/sh\n")  # there, not executable
    fake.write_text(f"#!/bin/sh\necho 'Enroot version: 4.1.2'\necho '  ENROOT_SYSCONF_PATH={etc}'"
                    "\n")
    fake.chmod(0o755)
    proc = _init(env, "--partition", "batch", "--output", str(tmp_path / "p.toml"))
    assert proc.returncode == 0, proc.stderr
    assert (f"warning: dgx02: pyxis without enroot's 50-slurm-pmi.sh hook in {etc}/hooks.d "
            "(enroot info): multi-node srun --mpi=pmix fails in containers") in proc.stdout
    assert '# runtime = "pyxis"' in (tmp_path / "p.toml").read_text()
    (etc / "hooks.d" / "50-slurm-pmi.sh").chmod(0o755)  # enabled: no warning
    proc = _init(env, "--partition", "batch", "--output", str(tmp_path / "q.toml"))
    assert proc.returncode == 0 and "50-slurm-pmi.sh" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("args, status, line", [
    (["--partition", "gpu"], 2,
     "chainermn-rt site: error: --partition: 'gpu' is not a partition of this cluster; "
     "allowed: batch, debug, mixed"),
    (["--partition", "mixed"], 1,
     "chainermn-rt site: error: partition mixed: its nodes differ (dgx01: 112 CPUs, 1945600 MB,"
     " Gres=gpu:h100:8(S:0-1); dgx03: 224 CPUs, 1945600 MB, Gres=gpu:h100:8(S:0-1)); a "
     "profile's partition has one node shape"),
    (["--partition", "batch", "--partition", "batch"], 2,
     "chainermn-rt site: error: --partition: ['batch', 'batch'] names one twice; allowed: each "
     "once"),
    (["--partition", "batch", "--name", "a b"], 2,
     "chainermn-rt site: error: --name: 'a b'; allowed: letters, digits, '.', '_', '-'"),
    (["--partition", "batch", "--output", "{out}/exists.toml"], 2,
     "chainermn-rt site: error: --output: {out}/exists.toml exists; allowed: a new file, or "
     "--force to replace it"),
    (["--partition", "batch", "--output", "{out}/no/such/p.toml"], 2,
     "chainermn-rt site: error: --output: {out}/no/such/p.toml; allowed: a file in an existing "
     "folder"),
    (["--partition", "batch", "--output", "{out}/p.json"], 2,
     "chainermn-rt site: error: --output: {out}/p.json; allowed: a file ending in .toml"),
])
def test_bad_input_is_one_line_and_nothing_is_written(tmp_path, args, status, line):
    env = _stubs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "exists.toml").write_text("name = 'kept'\n")
    args = [a.format(out=out) for a in args]
    if "--output" not in args:
        args += ["--output", str(out / "new.toml")]
    before = folder_contents(out)
    proc = _init(env, *args)
    assert (proc.returncode, proc.stderr) == (status, line.format(out=out) + "\n")
    assert folder_contents(out) == before


def test_slurm_unreachable_is_exit_3(tmp_path):
    env = _stubs(tmp_path)
    (tmp_path / "stub/bin/scontrol").write_text(
        "#!/bin/sh\necho 'scontrol: error: Unable to contact slurm controller' >&2\nexit 1\n")
    proc = _init(env, "--partition", "batch", "--output", str(tmp_path / "p.toml"))
    assert (proc.returncode, proc.stderr) == (3, "chainermn-rt site: error: scontrol show config"
                                              " failed (exit 1): scontrol: error: Unable to "
                                              "contact slurm controller\n")
    assert not (tmp_path / "p.toml").exists()


def test_a_tmpfs_no_profile_may_hold_is_exit_3_naming_it(tmp_path):
    env = _stubs(tmp_path)
    config = tmp_path / "stub/config"
    config.write_text(CONFIG.replace("/local/%n/tmp", "/local/a,b"))
    proc = _init(env, "--partition", "batch", "--output", str(tmp_path / "p.toml"))
    assert (proc.returncode, proc.stderr) == (
        3, "chainermn-rt site: error: scontrol show config: TmpFS: '/local/a,b' is not "
        "allowed; allowed: an absolute path as slurm.conf writes it (%n and %h for the node's "
        "name and host), without spaces, ',', ':' or '$'\n")
    assert not (tmp_path / "p.toml").exists()


def test_the_written_text_is_what_parse_site_reads(tmp_path):
    """Every field written comes back through the profile schema (the command checks this
    before writing; here the text itself)."""
    env = _stubs(tmp_path)
    out = tmp_path / "p.toml"
    assert _init(env, "--partition", "debug", "--output", str(out),
                 "--name", "lab-1").returncode == 0
    site = parse_site(tomllib.loads(out.read_text()), out)
    assert site.name == "lab-1" and [p.name for p in site.partitions] == ["debug"]
    assert _init(env, "--partition", "debug", "--output", str(out)).returncode == 2
    assert _init(env, "--partition", "debug", "--output", str(out), "--force").returncode == 0
    assert load_site(out).name == "dgx"
