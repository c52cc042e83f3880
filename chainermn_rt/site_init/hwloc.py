"""A node's hardware from ``lstopo --whole-system --of xml`` (hwloc 2): NUMA nodes with their
whole cores, and the GPUs and HCAs on PCIe with the switches above them.

``--whole-system`` matters: inside a job's cgroup hwloc (like ``nvidia-smi topo -m``) would
report only the CPUs the job may use.

>>> topo = read(FIXTURE_MINI)
>>> topo.numa, [(g.busid, g.numa, g.switches) for g in topo.gpus]
({0: [[0, 2], [1, 3]]}, [('0000:1b:00.0', 0, ('0000:17:00.0',))])
>>> [(h.name, h.numa, h.switches) for h in topo.hcas]
[('mlx5_0', 0, ('0000:17:00.0',))]
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

# PCI classes: 0x0300 VGA, 0x0302 3D controller (NVIDIA's data-centre GPUs)
_GPU_CLASSES = ("0300", "0302")
_NVIDIA = "10de"


@dataclass(frozen=True)
class Device:
    """A GPU or an HCA: PCI bus id, OS name (``mlx5_0``; a GPU's ``cuda0`` or ``nvml0`` when
    hwloc has that backend), NUMA node (None when hwloc cannot place it) and the PCIe bridges
    above it, nearest first, host bridge excluded."""

    busid: str
    name: str
    numa: int | None
    switches: tuple[str, ...]


@dataclass(frozen=True)
class Topology:
    numa: dict[int, list[list[int]]]  # NUMA node -> its cores, each the list of its PUs
    gpus: list[Device]  # NVIDIA GPUs in PCI bus order
    hcas: list[Device]  # OpenFabrics devices (InfiniBand, RoCE), by name


def cpuset(text: str | None) -> set[int]:
    """``0x000000ff,0xffffffff`` (32-bit words, most significant first) -> the set bits.

    >>> sorted(cpuset("0x00000001,0x80000000"))
    [31, 32]
    """
    if not text:
        return set()
    value = int("".join(word.removeprefix("0x").rjust(8, "0") for word in text.split(",")), 16)
    return {i for i in range(value.bit_length()) if value >> i & 1}


def read(xml_text: str) -> Topology:
    """The topology in ``xml_text``; ValueError when it is not hwloc 2 XML."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as err:
        raise ValueError(f"not XML: {err}") from None
    if root.tag != "topology":
        raise ValueError("not hwloc XML: no <topology>")
    numa_cpus: dict[int, set[int]] = {}
    cores: list[list[int]] = []
    gpus: list[Device] = []
    hcas: list[Device] = []

    def walk(node: ET.Element, cpus: set[int], bridges: tuple[str, ...]) -> None:
        kind = node.get("type")
        if kind == "NUMANode":
            numa_cpus[int(node.get("os_index", "0"))] = cpuset(node.get("cpuset"))
        elif kind == "Core":
            cores.append(sorted(int(pu.get("os_index", "0")) for pu in node
                                if pu.get("type") == "PU"))
        elif kind == "Bridge" and node.get("bridge_type", "").startswith("1-"):
            bridges = (node.get("pci_busid", "?"), *bridges)
        elif kind == "PCIDev":
            pci_type = node.get("pci_type", "")
            busid = node.get("pci_busid", "?")
            names = [o.get("name", "") for o in node if o.get("type") == "OSDev"]
            if pci_type[:4] in _GPU_CLASSES and f"[{_NVIDIA}:" in pci_type:
                gpus.append((busid, next((n for n in names if n.startswith(("cuda", "nvml"))),
                                         ""), frozenset(cpus), bridges))
            for child in node:
                if child.get("type") == "OSDev" and child.get("osdev_type") == "3":
                    hcas.append((busid, child.get("name", ""), frozenset(cpus), bridges))
        if node.get("cpuset") is not None and kind not in ("Bridge", "PCIDev", "OSDev"):
            cpus = cpuset(node.get("cpuset"))
        for child in node:
            if child.tag == "object":
                walk(child, cpus, bridges)

    for top in root:
        if top.tag == "object":
            walk(top, set(), ())

    def numa_of(cpus: frozenset[int]) -> int | None:
        near = [n for n, c in sorted(numa_cpus.items()) if c and c <= cpus]
        return near[0] if len(near) == 1 else None

    numa = {n: [c for c in cores if c and c[0] in cpus] for n, cpus in sorted(numa_cpus.items())}
    return Topology(numa,
                    [Device(b, name, numa_of(c), s) for b, name, c, s in sorted(gpus)],
                    sorted((Device(b, name, numa_of(c), s) for b, name, c, s in hcas),
                           key=lambda d: _natural(d.name)))


def _natural(name: str) -> tuple:
    """``mlx5_10`` after ``mlx5_9``."""
    head = name.rstrip("0123456789")
    return head, int(name[len(head):] or -1)


FIXTURE_MINI = """<topology version="2.0">
 <object type="Machine" os_index="0" cpuset="0x0000000f">
  <object type="Package" os_index="0" cpuset="0x0000000f">
   <object type="NUMANode" os_index="0" cpuset="0x0000000f"/>
   <object type="Core" os_index="0" cpuset="0x00000005">
    <object type="PU" os_index="0" cpuset="0x00000001"/>
    <object type="PU" os_index="2" cpuset="0x00000004"/>
   </object>
   <object type="Core" os_index="1" cpuset="0x0000000a">
    <object type="PU" os_index="1" cpuset="0x00000002"/>
    <object type="PU" os_index="3" cpuset="0x00000008"/>
   </object>
   <object type="Bridge" bridge_type="0-1" pci_busid="0000:00:00.0">
    <object type="Bridge" bridge_type="1-1" pci_busid="0000:17:00.0">
     <object type="PCIDev" pci_busid="0000:1b:00.0" pci_type="0302 [10de:2330] [10de:16c1] a1"/>
     <object type="PCIDev" pci_busid="0000:18:00.0" pci_type="0207 [15b3:1021] [15b3:0041] 00">
      <object type="OSDev" name="mlx5_0" osdev_type="3"/>
     </object>
    </object>
   </object>
  </object>
 </object>
</topology>"""
