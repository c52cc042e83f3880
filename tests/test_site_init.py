"""The parsers behind ``site init`` on fixtures, without Slurm or a GPU: scontrol's one-line
records, hwloc XML (read back through Debian's real lstopo), the NVIDIA driver's files and
``nvidia-smi topo -m``, and the slots made from them."""

from __future__ import annotations

import subprocess

import pytest
from hwloc_fixtures import GPU_BUSIDS, dgx_h100

from chainermn_rt import slurm_records as records
from chainermn_rt.site import load_site
from chainermn_rt.site_init import hwloc, nvidia, slots
from chainermn_rt.site_init.hwloc import Device, Topology

from conftest import REPO

NODES = (REPO / "tests/fixtures/scontrol-show-node.txt").read_text()  # scontrol -o show node


def test_one_line_records_keep_values_with_spaces():
    found = records.records(NODES)
    assert [r["NodeName"] for r in found] == ["node1", "node2"]
    assert found[0]["OS"] == "Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 " \
                             "(2024-02-01)"
    assert found[0]["Reason"] == "maintenance [root@2026-12-04T02:00:00]"
    assert found[0]["CPUTot"] == "4" and found[1]["State"] == "IDLE+DRAIN"
    assert [records.gres_gpus(r["Gres"]) for r in found] == [4, 4]


def test_show_config_lines():
    text = ("Configuration data as of 2026-12-04T02:00:00\nMpiDefault              = pmix\n"
            "SlurmctldHost[0]        = head(10.10.0.1)\nAccountingStorageType   = (null)\n")
    assert records.config(text) == {"MpiDefault": "pmix", "SlurmctldHost[0]": "head(10.10.0.1)",
                                    "AccountingStorageType": "(null)"}


@pytest.fixture(scope="module")
def dgx_xml(tmp_path_factory) -> str:
    """The handwritten DGX H100 XML as Debian's lstopo reads and writes it back."""
    path = tmp_path_factory.mktemp("hwloc") / "dgx.xml"
    path.write_text(dgx_h100())
    return subprocess.run(["lstopo-no-graphics", "--input", str(path), "--of", "xml"],
                          capture_output=True, text=True, check=True).stdout


def test_hwloc_reads_numa_nodes_cores_gpus_and_hcas(dgx_xml):
    topo = hwloc.read(dgx_xml)
    assert {n: (len(cores), cores[0], cores[-1]) for n, cores in topo.numa.items()} == {
        0: (56, [0], [55]), 1: (56, [56], [111])}
    assert [g.busid for g in topo.gpus] == GPU_BUSIDS
    assert [g.numa for g in topo.gpus] == [0] * 4 + [1] * 4
    assert [h.name for h in topo.hcas] == [f"mlx5_{i}" for i in range(12)]
    gpu0, hca0 = topo.gpus[0], topo.hcas[0]
    assert gpu0.switches == hca0.switches == ("0000:19:00.0", "0000:18:00.0")


def test_the_dgx_slots_equal_the_hand_written_profile(dgx_xml):
    made, warnings = slots.gpu_slots(hwloc.read(dgx_xml), GPU_BUSIDS)
    profile = load_site(REPO / "slurm/sites/dgx-h100.toml")
    assert warnings == []
    assert tuple(made) == profile.partition("batch").topology.slots


def test_slurm_order_follows_the_device_minors(dgx_xml):
    """Minors 0 and 1 swapped against the bus order: Slurm's GPU 0 is the second by bus."""
    minors = [(b, {0: 1, 1: 0}.get(i, i)) for i, b in enumerate(GPU_BUSIDS)]
    order = nvidia.slurm_order(minors)
    made, _ = slots.gpu_slots(hwloc.read(dgx_xml), order)
    assert [(s.gpu, s.cpus, s.hcas) for s in made[:2]] == [(0, "0-13", ("mlx5_3:1",)),
                                                           (1, "14-27", ("mlx5_0:1",))]


def test_gpus_hwloc_cannot_place_get_the_cores_round_robin():
    cores = [[c] for c in range(8)]
    topo = Topology({0: cores[:4], 1: cores[4:]}, [Device("0000:01:00.0", "", None, ())], [])
    made, warnings = slots.gpu_slots(topo, ["0000:01:00.0", "0000:02:00.0"])
    assert [(s.numa, s.cpus) for s in made] == [(0, "0,2,4,6"), (0, "1,3,5,7")]
    assert warnings == [f"GPU {i} ({b}): hwloc cannot place it; it gets the node's cores "
                        "round-robin" for i, b in enumerate(["0000:01:00.0", "0000:02:00.0"])]


def test_more_gpus_hwloc_cannot_see_than_cores_take_the_cores_in_turn():
    """The sandbox: 4 fake GPUs over 2 cores, as its fake4 topology has them."""
    made, warnings = slots.gpu_slots(Topology({0: [[0], [1]]}, [], []), [""] * 4)
    assert [(s.gpu, s.numa, s.cpus, s.hcas) for s in made] == [
        (0, 0, "0", ()), (1, 0, "1", ()), (2, 0, "0", ()), (3, 0, "1", ())]
    assert len(warnings) == 4


def test_more_gpus_than_cores_on_a_numa_node_share_them():
    gpus = [Device(f"0000:0{i}:00.0", "", 0, ()) for i in range(3)]
    made, warnings = slots.gpu_slots(Topology({0: [[0], [1]]}, gpus, []),
                                     [g.busid for g in gpus])
    assert [s.cpus for s in made] == ["0", "1", "0"] and len(warnings) == 3


def test_nvidia_files_and_topo_matrix():
    info = ("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 123\nBus Location: \t 0000:1B:00.0\n"
            "Device Minor: \t 3\nGPU Excluded:\t No\n")
    assert nvidia.read_information(info) == ("0000:1b:00.0", 3)
    with pytest.raises(ValueError, match="Device Minor"):
        nvidia.read_information("Model: x\n")
    matrix = ("\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
              "GPU0\t X \tNV18\tPIX\t0-55,112-167\t0\t\tN/A\n"
              "GPU1\tNV18\t X \tSYS\t56-111,168-223\t1\t\tN/A\n"
              "NIC0\tPIX\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n")
    rows = nvidia.topo_matrix(matrix)
    assert sorted(rows) == [0, 1]
    assert rows[1]["CPU Affinity"] == "56-111,168-223" and rows[0]["NIC0"] == "PIX"
    assert rows[1]["NUMA Affinity"] == "1"


@pytest.mark.parametrize("text", ["", "<x/>", "<topology", "not xml"])
def test_what_is_not_hwloc_xml_is_a_value_error(text):
    with pytest.raises(ValueError):
        hwloc.read(text)
