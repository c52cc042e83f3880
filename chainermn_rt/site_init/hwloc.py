"""A node's hardware from ``lstopo --whole-system --of xml`` (hwloc 2): NUMA nodes with their
whole cores, and the GPUs and HCAs on PCIe with the switches above them.

``--whole-system`` matters: inside a job's cgroup hwloc (like ``nvidia-smi topo -m``) would
report only the CPUs the job may use.

Cores follow hwloc's model, not one nesting: a core is a ``Core`` object with the PUs below it
at any depth (caches may sit between, as QEMU writes ``Core > L1Cache > PU``); a PU with no
``Core`` above it is a core of its own. A core belongs to every NUMA node whose ``cpuset``
holds its PUs (hwloc 2 hangs NUMA nodes below their parent as memory children, with the
parent's cpuset; a package's DRAM and HBM nodes both hold its cores). Cores no NUMA node holds
(hwloc may leave out a NUMA node without memory) are kept apart, in ``unplaced``, not placed:
no NUMA node's memory is local to them (hwloc writes their nodeset empty) and a slot binds its
memory to one, so ``site init`` names them in a warning and no slot gets them. PUs and cores
so counted agree with ``hwloc-calc --number-of pu|core`` (plus the PUs outside every Core).

The XML is a node's answer, untrusted: read in pieces with its nesting bounded
(:data:`MAX_DEPTH`), every attribute used checked (numbers in ASCII digits and bounded, PCI
bus ids and device names by their patterns), and hwloc's rules held where the counts hang on
them (a PU's cpuset is its own CPU alone, no two PUs share one; a Core holds PUs, no Core or PU
below another, a Core's cpuset is its PUs'; one core's PUs within one NUMA node set); anything
else is a ValueError naming the object and the attribute.

>>> topo = read(FIXTURE_MINI)
>>> topo.numa, [(g.busid, g.numa, g.switches) for g in topo.gpus]
({0: [[0, 2], [1, 3]]}, [('0000:1b:00.0', 0, ('0000:17:00.0',))])
>>> [(h.name, h.numa, h.switches) for h in topo.hcas]
[('mlx5_0', 0, ('0000:17:00.0',))]
>>> topo = read(FIXTURE_SHAPES)
>>> topo.numa, topo.unplaced
({0: [[0, 1], [2]]}, [[3]])
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from chainermn_rt.errors import message_value
from chainermn_rt.site_init.cores import Core, CoreTree
from chainermn_rt.slurm_records import MAX_CPUS_PER_NODE

# PCI classes: 0x0300 VGA, 0x0302 3D controller (NVIDIA's data-centre GPUs)
_GPU_CLASSES = ("0300", "0302")
_NVIDIA = "10de"
# hwloc nests Machine > Package > Die > caches > Core > PU, and PCIe bridges a few deep; a
# node of 1,000 cores writes some 10,000 elements
MAX_DEPTH = 64
MAX_ELEMENTS = 200_000
# what a CPU object may not sit below: I/O and Misc objects (hwloc refuses those), a PU
_HOLDS_NO_CPUS = ("Bridge", "PCIDev", "OSDev", "Misc", "PU")
# domain:bus:device.function (Intel VMD's domains pass ffff: more digits)
PCI_BUSID = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]\Z")
DEVICE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")
_WORD = re.compile(r"(0x[0-9a-fA-F]{1,8})?\Z")  # an empty word is 0 (hwloc writes ",,")
_INDEX = re.compile(r"[0-9]{1,5}\Z")


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
    numa: dict[int, list[list[int]]]  # NUMA node -> the cores it holds, each its PUs
    gpus: list[Device]  # NVIDIA GPUs in PCI bus order
    hcas: list[Device]  # OpenFabrics devices (InfiniBand, RoCE), by name
    unplaced: list[list[int]] = field(default_factory=list)  # cores in no NUMA node

    def cores(self) -> list[list[int]]:
        """Every core once (one that two NUMA nodes hold too), the unplaced ones last.

        >>> Topology({0: [[0, 2]], 1: [[0, 2]]}, [], [], [[1]]).cores()
        [[0, 2], [1]]
        """
        seen: dict[tuple[int, ...], list[int]] = {}
        for core in [c for n in sorted(self.numa) for c in self.numa[n]] + self.unplaced:
            seen.setdefault(tuple(core), core)
        return list(seen.values())


def cpuset(text: str | None) -> int:
    """``0x000000ff,0xffffffff`` (32-bit words, most significant first; an empty word is 0)
    -> the set as a bit mask; ValueError for anything else, or bits past
    :data:`MAX_CPUS_PER_NODE`.

    >>> bin(cpuset("0x00000001,0x80000000")), cpuset("0x1,,0x0") == 1 << 64
    ('0b110000000000000000000000000000000', True)
    """
    if not text:
        return 0
    words = text.split(",")
    if len(words) > MAX_CPUS_PER_NODE // 32 or not all(_WORD.match(w) for w in words):
        raise ValueError(f"{message_value(text, 40)} is not a CPU set; allowed: 32-bit "
                         f"hexadecimal words (0x0000000f,0xffffffff), {MAX_CPUS_PER_NODE} CPUs "
                         "at most")
    return int("".join(word[2:].rjust(8, "0") for word in words), 16)


class _Bounded(ET.TreeBuilder):
    """ElementTree's builder, refusing an element nested deeper than :data:`MAX_DEPTH` or
    more than :data:`MAX_ELEMENTS` of them."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = self.elements = 0

    def start(self, tag, attrs):  # noqa: ANN001, ANN201 - TreeBuilder's API
        self.depth += 1
        self.elements += 1
        if self.depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} elements; allowed: hwloc 2 XML")
        if self.elements > MAX_ELEMENTS:
            raise ValueError(f"more than {MAX_ELEMENTS} elements; allowed: hwloc 2 XML of one "
                             "node")
        return super().start(tag, attrs)

    def end(self, tag):  # noqa: ANN001, ANN201
        self.depth -= 1
        return super().end(tag)


def _parse(xml_text: str) -> ET.Element:
    """The XML's root, fed in pieces so that nesting past :data:`MAX_DEPTH` stops it early;
    ValueError when it is not hwloc XML."""
    parser = ET.XMLParser(target=_Bounded())
    try:
        for at in range(0, len(xml_text), 1 << 16):
            parser.feed(xml_text[at:at + (1 << 16)])
        root = parser.close()
    except ET.ParseError as err:
        raise ValueError(f"not XML ({err}); allowed: hwloc 2 XML") from None
    if root.tag != "topology":
        raise ValueError("not hwloc XML: no <topology>; allowed: hwloc 2 XML")
    return root


class _Object:
    """One ``<object>``'s attributes, each checked where it is read."""

    def __init__(self, node: ET.Element):
        self.node = node
        kind = node.get("type", "")
        self.kind = kind if kind.isalnum() else "object"

    def index(self) -> int:
        allowed = f"a whole number 0-{MAX_CPUS_PER_NODE - 1}"
        value = int(self.match("os_index", _INDEX, allowed, "0"))
        if value >= MAX_CPUS_PER_NODE:
            raise ValueError(f"{self.kind} os_index={value}; allowed: {allowed}")
        return value

    def cpus(self) -> int:
        try:
            return cpuset(self.node.get("cpuset"))
        except ValueError as err:
            raise ValueError(f"{self.kind} cpuset: {err}") from None

    def own_cpus(self) -> int:
        """The cpuset of a NUMA node, core or PU, which hwloc 2 always writes."""
        if self.node.get("cpuset") is None:
            raise ValueError(f"{self.kind} os_index={self.index()} without a cpuset; allowed: "
                             "hwloc 2 XML (it writes one for every CPU and NUMA object)")
        return self.cpus()

    def match(self, attribute: str, pattern: re.Pattern, allowed: str, default: str = "") -> str:
        text = self.node.get(attribute, default)
        if not pattern.match(text):
            raise ValueError(f"{self.kind} {attribute}={message_value(text, 40)}; allowed: "
                             f"{allowed}")
        return text


def read(xml_text: str) -> Topology:
    """The topology in ``xml_text``; ValueError naming the object and attribute when it is not
    hwloc 2 XML a node could print."""
    root = _parse(xml_text)
    tree = CoreTree()
    gpus: list[tuple] = []
    hcas: list[tuple] = []
    busid = "a PCI bus id such as 0000:1b:00.0"
    name = "a device name of letters, digits, '_', '.', '-'"

    def walk(node: ET.Element, cpus: int, bridges: tuple[str, ...], core: Core | None,
             holder: str) -> None:
        obj = _Object(node)
        if obj.kind in ("NUMANode", "Core", "PU") and holder:
            raise ValueError(f"{obj.kind} os_index={obj.index()} below a {holder}; allowed: "
                             "hwloc 2 XML (CPUs and NUMA nodes below CPU objects only)")
        if obj.kind == "NUMANode":
            tree.numa_node(obj.index(), obj.own_cpus())
        elif obj.kind == "Core":
            core = tree.core(obj.index(), obj.own_cpus(), core)
        elif obj.kind == "PU":
            tree.pu(obj.index(), obj.own_cpus(), core)
        elif obj.kind == "Bridge" and node.get("bridge_type", "").startswith("1-"):
            bridges = (obj.match("pci_busid", PCI_BUSID, busid).lower(), *bridges)
        elif obj.kind == "PCIDev":
            pci_type = node.get("pci_type", "")
            if pci_type[:4] in _GPU_CLASSES and f"[{_NVIDIA}:" in pci_type:
                names = [o.get("name", "") for o in node if o.get("type") == "OSDev"]
                gpus.append((obj.match("pci_busid", PCI_BUSID, busid).lower(),
                             next((n for n in names if n.startswith(("cuda", "nvml"))
                                   and DEVICE_NAME.match(n)), ""), cpus, bridges))
            for child in node:
                if child.get("type") == "OSDev" and child.get("osdev_type") == "3":
                    hcas.append((obj.match("pci_busid", PCI_BUSID, busid).lower(),
                                 _Object(child).match("name", DEVICE_NAME, name), cpus,
                                 bridges))
        if node.get("cpuset") is not None and obj.kind not in ("Bridge", "PCIDev", "OSDev"):
            cpus = obj.cpus()
        holder = obj.kind if obj.kind in _HOLDS_NO_CPUS else holder
        for child in node:
            if child.tag == "object":
                walk(child, cpus, bridges, core, holder)  # at most MAX_DEPTH deep

    for top in root:
        if top.tag == "object":
            walk(top, 0, (), None, "")
    numa, unplaced = tree.placed()

    placed: dict[int, int | None] = {}

    def numa_of(cpus: int) -> int | None:
        if cpus not in placed:  # the NUMA node whose CPUs are all in `cpus`, if one alone
            near = [n for n, c in sorted(tree.numa_cpus.items()) if c and not c & ~cpus]
            placed[cpus] = near[0] if len(near) == 1 else None
        return placed[cpus]

    return Topology(numa,
                    [Device(b, name, numa_of(c), s) for b, name, c, s in sorted(gpus)],
                    sorted((Device(b, name, numa_of(c), s) for b, name, c, s in hcas),
                           key=lambda d: _natural(d.name)), unplaced)


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


# Core > L1Cache > PU (QEMU's per-thread caches), a PU without a Core, one outside the NUMA
# node's cpuset (package 1 without one); hwloc 2.9's hwloc-calc reads it
FIXTURE_SHAPES = """<topology version="2.0">
 <object type="Machine" os_index="0" cpuset="0xf" complete_cpuset="0xf" nodeset="0x1"
  complete_nodeset="0x1">
  <object type="Package" os_index="0" cpuset="0x7" complete_cpuset="0x7" nodeset="0x1"
   complete_nodeset="0x1">
   <object type="NUMANode" os_index="0" cpuset="0x7" complete_cpuset="0x7" nodeset="0x1"
    complete_nodeset="0x1"/>
   <object type="Core" os_index="0" cpuset="0x3" complete_cpuset="0x3" nodeset="0x1"
    complete_nodeset="0x1">
    <object type="L1Cache" cpuset="0x1" complete_cpuset="0x1" nodeset="0x1"
     complete_nodeset="0x1" cache_size="32768" depth="1">
     <object type="PU" os_index="0" cpuset="0x1" complete_cpuset="0x1" nodeset="0x1"
      complete_nodeset="0x1"/>
    </object>
    <object type="L1Cache" cpuset="0x2" complete_cpuset="0x2" nodeset="0x1"
     complete_nodeset="0x1" cache_size="32768" depth="1">
     <object type="PU" os_index="1" cpuset="0x2" complete_cpuset="0x2" nodeset="0x1"
      complete_nodeset="0x1"/>
    </object>
   </object>
   <object type="PU" os_index="2" cpuset="0x4" complete_cpuset="0x4" nodeset="0x1"
    complete_nodeset="0x1"/>
  </object>
  <object type="Package" os_index="1" cpuset="0x8" complete_cpuset="0x8" nodeset="0x0"
   complete_nodeset="0x0">
   <object type="PU" os_index="3" cpuset="0x8" complete_cpuset="0x8" nodeset="0x0"
    complete_nodeset="0x0"/>
  </object>
 </object>
</topology>"""
