"""``chainermn-rt site init`` against the sandbox's real Slurm: scontrol, srun --mpi=list and a
probe step on a node, with the real lstopo. ``[sandbox] hwloc_xml`` shows a node the hardware
of a handwritten DGX H100 (tests/hwloc_fixtures.py) through the TaskProlog."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hwloc_fixtures import dgx_h100

from chainermn_rt.sandbox import Sandbox
from chainermn_rt.site import load_site, resolve_site

from conftest import REPO, require_commands

pytestmark = pytest.mark.slurm


def _chainermn_rt(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chainermn_rt", *args], env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_sandbox_profiled_by_site_init_matches_its_own_profile(sandbox, tmp_path):
    out = tmp_path / "found.toml"
    start = time.monotonic()
    proc = _chainermn_rt(sandbox.env(), "site", "init", "--partition", "gpu", "--output",
                         str(out))
    print(f"site init on the sandbox: {time.monotonic() - start:.1f} s\n{proc.stdout}")
    assert proc.returncode == 0, proc.stderr
    live = _chainermn_rt(sandbox.env(), "site", "check", str(out), "--live")
    assert live.stdout.splitlines()[-1] == "live: matches the cluster", live.stdout + live.stderr
    found, shipped = (load_site(p).partition("gpu") for p in (out, resolve_site("sandbox")))
    assert found.topology.slots == tuple(replace(s, hcas=()) for s in shipped.topology.slots)
    # local_scratch: a folder the administrator chooses; no cluster says it
    assert replace(found, topology=None) == replace(shipped, topology=None, local_scratch=None)
    assert "warning: node1: the GPU topology is unknown (hwloc sees no NVIDIA GPU)" in \
        proc.stdout.splitlines()
    # bad input against a real cluster: the partitions it has are listed, nothing written
    bad = _chainermn_rt(sandbox.env(), "site", "init", "--partition", "gpus", "--output",
                        str(tmp_path / "bad.toml"))
    assert (bad.returncode, bad.stderr) == (2, "chainermn-rt site: error: --partition: 'gpus' "
                                            "is not a partition of this cluster; allowed: cpu, "
                                            "gpu\n")
    assert not (tmp_path / "bad.toml").exists()


def _init_on_a_fake_node(tmp_path: Path, gpus: int, cpus: int) -> subprocess.CompletedProcess:
    """``site init`` on a one-node sandbox beside the session's (up for this only): ``gpus``
    fake GPUs, ``cpus`` CPUs, and the DGX H100 XML as its hardware."""
    require_commands("munged", "slurmctld", "slurmd", "ip", "lstopo")
    (tmp_path / "dgx.xml").write_text(dgx_h100())
    slots = "\n".join(f'  {{ gpu = {i}, numa = 0, cpus = "0" }},' for i in range(gpus))
    profile = tmp_path / "fake.toml"
    profile.write_text(f"""name = "fake{gpus}"
launcher = "srun"
srun_mpi = "pmix"

[[partitions]]
name = "gpu"
default = true
nodes = 1
max_time = "00:30:00"
cpus_per_node = {cpus}
memory = "2G"
topology = "fake"

[topology.fake]
slots = [
{slots}
]

[sandbox]
nodes = 1
hwloc_xml = "dgx.xml"
""")
    sb = Sandbox.from_profile(profile, state_dir=tmp_path / "state")
    sb.up()
    try:
        return _chainermn_rt(sb.env(), "site", "init", "--partition", "gpu", "--output",
                             str(tmp_path / "found.toml"))
    finally:
        sb.down()


def test_a_node_with_a_dgx_h100s_hardware_gives_the_shipped_dgx_slots(tmp_path):
    proc = _init_on_a_fake_node(tmp_path, gpus=8, cpus=112)
    assert proc.returncode == 0, proc.stderr
    found = load_site(tmp_path / "found.toml").partition("gpu")
    shipped = load_site(REPO / "slurm/sites/dgx-h100.toml").partition("batch")
    assert found.topology.slots == shipped.topology.slots
    assert "CPUs, hwloc sees" not in proc.stdout  # 112 and 112


def test_more_gpus_in_hwloc_than_in_slurm_is_one_line_and_nothing_written(tmp_path):
    proc = _init_on_a_fake_node(tmp_path, gpus=4, cpus=112)
    assert (proc.returncode, proc.stderr) == (
        1, "chainermn-rt site: error: node1: Slurm has 4 GPUs (Gres=gpu:4), hwloc sees 8\n")
    assert not (tmp_path / "found.toml").exists()
