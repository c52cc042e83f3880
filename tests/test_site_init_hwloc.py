"""``site init``'s hwloc reader against hwloc itself: its PUs, cores and NUMA nodes equal what
the real ``hwloc-calc`` counts on the same XML, for generated shapes (caches between a core
and its PUs, PUs without a Core, PUs no NUMA node holds, several packages and NUMA nodes, SMT),
this machine's ``lstopo --whole-system --of xml`` and the sandbox's DGX H100; one small
fixture per shape with the exact topology; what would make the counts differ refused in one
line. A PU without a Core is a core of its own (hwloc-calc's cores plus its PUs outside every
Core); PUs no NUMA node holds are the reader's ``unplaced`` (hwloc-calc's ``all ~numa:all``).

hwloc-calc must be installed (``make setup``): these tests fail, never skip, without it.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from hwloc_fixtures import dgx_h100
from hwloc_shapes import Obj, expected, machines, xml
from hypothesis import HealthCheck, given, settings

from chainermn_rt.site_init import hwloc, node_report, survey
from chainermn_rt.site_init.hwloc import Topology

from conftest import REPO, require_commands

SOME = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 40)), deadline=None,
                derandomize=os.environ.get("FUZZ_RANDOM") != "1",
                suppress_health_check=[HealthCheck.too_slow])
# what hwloc-calc may say on stderr besides its answers
_CHATTER = re.compile(r"Waiting for locations to process on stdin\.\.\.|.*: Loading XML "
                      r"topology without DTD|could not find level specified by location "
                      r"core:all|ignored unrecognized argument core:all|unavailable "
                      r"--number-of type Core")


def _calc(path: Path, args: list[str], lines: list[str]) -> list[int]:
    """hwloc-calc's answers, one per line of ``lines``."""
    proc = subprocess.run(["hwloc-calc", "--input", str(path), "--whole-system", *args],
                          input="".join(f"{line}\n" for line in lines), capture_output=True,
                          text=True, timeout=60)
    said = [line for line in proc.stderr.splitlines() if not _CHATTER.fullmatch(line)]
    assert proc.returncode == 0 and not said, (proc.returncode, proc.stderr)
    answers = [line for line in proc.stdout.split("\n") if line and not _CHATTER.fullmatch(line)]
    assert len(answers) == len(lines) or (answers == [] and "unavailable --number-of type "
                                          "Core" in proc.stderr), proc.stdout
    return [int(a) for a in answers] or [0]


def hwloc_counts(path: Path) -> dict:
    """What hwloc-calc counts in the XML at ``path``: PUs, cores (Core objects and the PUs
    outside every Core), PUs no NUMA node holds, each NUMA node's PUs."""
    require_commands("hwloc-calc")
    pus, outside, in_cores = _calc(path, ["--number-of", "pu"],
                                   ["all", "all ~numa:all", "core:all"])
    [core_objects] = _calc(path, ["--number-of", "core"], ["all"])
    listed = subprocess.run(["hwloc-calc", "--input", str(path), "--whole-system", "-I", "numa",
                             "--physical-output", "all"], capture_output=True, text=True,
                            timeout=60, check=True).stdout.strip()
    nodes = sorted(int(n) for n in listed.split(",") if n)
    per_node = _calc(path, ["--pi", "--number-of", "pu"], [f"numa:{n}" for n in nodes])
    return {"pus": pus, "cores": core_objects + pus - in_cores, "unplaced": outside,
            "numa": dict(zip(nodes, per_node, strict=True)) if nodes else {}}


def reader_counts(topo: Topology) -> dict:
    return {"pus": sum(map(len, topo.cores())), "cores": len(topo.cores()),
            "unplaced": sum(map(len, topo.unplaced)),
            "numa": {n: sum(map(len, cores)) for n, cores in topo.numa.items() if cores}}


def agrees(text: str, folder: Path) -> Topology:
    """The reader's topology of ``text``, checked against hwloc-calc's counts."""
    path = folder / "node.xml"
    path.write_text(text)
    topo = hwloc.read(text)
    assert reader_counts(topo) == hwloc_counts(path)
    return topo


@SOME
@given(machines())
def test_generated_shapes_agree_with_hwloc_calc(machine):
    text = xml(machine)
    with tempfile.TemporaryDirectory() as folder:
        topo = agrees(text, Path(folder))
    assert (topo.numa, topo.unplaced) == expected(machine)


def test_this_machines_lstopo_agrees_with_hwloc_calc(tmp_path):
    """What the probe step runs on a node (node_report.SCRIPT), here."""
    require_commands("lstopo", "hwloc-calc")
    text = subprocess.run(["lstopo", "--whole-system", "--of", "xml"], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    topo = agrees(text, tmp_path)
    assert topo.cores()


@pytest.mark.parametrize("name", ["dgx-h100.xml", "fixture"])
def test_the_sandbox_dgx_h100_agrees_with_hwloc_calc(tmp_path, name):
    """slurm/sites/dgx-h100.xml, every sandbox-dgx task's hardware, and the fixture that
    writes it (tests/test_sandbox_dgx.py holds the two equal)."""
    text = (REPO / "slurm/sites" / name).read_text() if name.endswith(".xml") else dgx_h100()
    topo = agrees(text, tmp_path)
    assert {n: len(cores) for n, cores in topo.numa.items()} == {0: 56, 1: 56}


def test_the_modules_fixtures_agree_with_hwloc_calc(tmp_path):
    assert agrees(hwloc.FIXTURE_SHAPES, tmp_path) == Topology({0: [[0, 1], [2]]}, [], [],
                                                              [[3]])


def _pu(i: int, *caches: str) -> Obj:
    """PU ``i`` below ``caches``, outermost first."""
    obj = Obj("PU", i)
    for kind in reversed(caches):
        obj = Obj(kind, children=[obj])
    return obj


def _machine(*packages: Obj, numa: tuple = ()) -> Obj:
    return Obj("Machine", children=list(packages), numa=list(numa))


SHAPES = {
    # QEMU with CPUID leaf 0x1f dies: per-thread L1 caches below each core, SMT apart
    "per-thread caches": (
        _machine(Obj("Package", 0, [Obj("Die", 0, [
            Obj("Core", 0, [_pu(0, "L1Cache"), _pu(2, "L1Cache")]),
            Obj("Core", 1, [_pu(1, "L1Cache"), _pu(3, "L1Cache")])])], numa=[0])),
        Topology({0: [[0, 2], [1, 3]]}, [], [])),
    # caches at different depths between a core and its PUs; one shared by both threads
    "caches at any depth": (
        _machine(Obj("Package", 0, [
            Obj("Core", 0, [_pu(0, "L2Cache", "L1Cache", "L1iCache")]),
            Obj("Core", 1, [Obj("L2Cache", children=[_pu(1, "L1Cache"), _pu(2)])]),
            Obj("Core", 3, [_pu(3)])], numa=[0])),
        Topology({0: [[0], [1, 2], [3]]}, [], [])),
    # PUs without a Core: each a core of its own
    "PUs without cores": (
        _machine(Obj("Package", 0, [_pu(0), _pu(1, "L1Cache"),
                                    Obj("L2Cache", children=[_pu(2), _pu(3)])], numa=[1])),
        Topology({1: [[0], [1], [2], [3]]}, [], [])),
    # the NUMA node of package 1 left out (memory-less): its cores apart, not dropped
    "PUs outside every NUMA node": (
        _machine(Obj("Package", 0, [Obj("Core", 0, [_pu(0), _pu(2)])], numa=[0]),
                 Obj("Package", 1, [Obj("Core", 1, [_pu(1), _pu(3)])])),
        Topology({0: [[0, 2]]}, [], [], [[1, 3]])),
    # a package's DRAM and HBM (below a memory-side cache) and the machine's CXL memory
    "heterogeneous NUMA nodes": (
        _machine(Obj("Package", 0, [Obj("Core", 0, [_pu(0)]), Obj("Core", 1, [_pu(1)])],
                     numa=[0, 2], memcache=True),
                 Obj("Package", 1, [Obj("Core", 0, [_pu(2)])], numa=[1]), numa=[3]),
        Topology({0: [[0], [1]], 1: [[2]], 2: [[0], [1]], 3: [[0], [1], [2]]}, [], [])),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_reads_exactly(tmp_path, shape):
    machine, topology = SHAPES[shape]
    assert agrees(xml(machine), tmp_path) == topology


def test_a_node_with_cpus_in_no_numa_node_is_a_warning_not_a_loss():
    """A CPU node: one slot per NUMA node; the unplaced CPUs named in a warning; a core two
    NUMA nodes hold counted once against Slurm's CPUs."""
    text = xml(_machine(Obj("Package", 0, [Obj("Core", 0, [_pu(0), _pu(2)])], numa=[0, 1]),
                        Obj("Package", 1, [Obj("Core", 1, [_pu(1), _pu(3)])])))
    report = node_report.NodeReport(
        hostname="cpu01", lstopo_xml=text, ib_ports=(), nvidia_information=(),
        nvidia_smi_topo="", runtimes=(), socket_ifname=None,
        enroot=node_report.enroot_probe.EnrootReport({}, (), ()))
    warnings: list[str] = []
    made = survey._topology("cpu", "cpu01", survey.Shape(4, 1024, ""), report, warnings)
    assert [(s.numa, s.cpus) for s in made.slots] == [(0, "0,2"), (1, "0,2")]
    assert warnings == ["cpu01: hwloc puts CPUs 1,3 in no NUMA node's cpuset; no slot binds "
                        "them"]


_BASE = xml(_machine(Obj("Package", 0, [Obj("Core", 0, [_pu(0), _pu(1)]),
                                        Obj("Core", 1, [_pu(2), _pu(3)])], numa=[0])))


def _edit(old: str, new: str, count: int = 1) -> str:
    assert old in _BASE
    return _BASE.replace(old, new, count)


_PU1 = '<object type="PU" os_index="1" cpuset="0x00000002"'
_CORE1 = '<object type="Core" os_index="1" cpuset="0x0000000c"'


@pytest.mark.parametrize(("text", "message"), [
    (_edit(_PU1, '<object type="PU" os_index="1" cpuset="0x00000020"'),
     "PU os_index=1 cpuset=0x20; allowed: its own CPU alone (0x2)"),
    (_edit(_PU1, '<object type="PU" os_index="0" cpuset="0x00000001"'),
     "two PU objects with os_index=0; allowed: hwloc 2 XML of one node"),
    (_edit(_PU1, '<object type="PU" os_index="1"'),
     "PU os_index=1 without a cpuset; allowed: hwloc 2 XML (it writes one for every CPU and "
     "NUMA object)"),
    (_edit(_CORE1, '<object type="Core" os_index="1" cpuset="0x0000000e"'),
     "Core os_index=1 cpuset=0xe; allowed: the PUs below it (0xc)"),
    (_edit('<object type="PU" os_index="2"', '<object type="Core" os_index="2"'),
     "Core os_index=2 below Core os_index=1; allowed: hwloc 2 XML of one node (no Core within "
     "a Core)"),
    (_edit(_CORE1, '<object type="Misc" os_index="1" cpuset="0x0000000c"'),
     "PU os_index=2 below a Misc; allowed: hwloc 2 XML (CPUs and NUMA nodes below CPU objects "
     "only)"),
    (_edit('<object type="NUMANode" os_index="0" cpuset="0x0000000f"',
           '<object type="NUMANode" os_index="0" cpuset="0x00000005"'),
     "Core os_index=0: PU 0 in NUMA nodes [0], PU 1 in []; allowed: a core whose PUs the same "
     "NUMA nodes' cpusets hold"),
    (_edit('<object type="PU" os_index="2"', '<object type="L1Cache" os_index="2"')
     .replace('<object type="PU" os_index="3"', '<object type="L1Cache" os_index="3"'),
     "Core os_index=1 holds no PU; allowed: hwloc 2 XML of one node (a Core with its PUs below "
     "it)"),
])
def test_what_would_make_the_counts_differ_is_one_line(text, message):
    with pytest.raises(ValueError) as caught:
        hwloc.read(text)
    assert str(caught.value) == message
