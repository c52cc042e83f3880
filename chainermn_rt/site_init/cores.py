"""A node's cores and the NUMA nodes that hold them, by hwloc's rules, from the CPU objects a
walk over hwloc's tree meets (:mod:`.hwloc` walks it and checks each attribute's text).

A core is a ``Core`` object's PUs, found at any depth below it; a PU with no ``Core`` above it
is a core of its own. A core belongs to every NUMA node whose cpuset holds its PUs; cores no
NUMA node holds are ``unplaced``. What would make these counts differ from hwloc's is a
ValueError of one line.

>>> tree = CoreTree()
>>> tree.numa_node(0, 0b0111)
>>> core = tree.core(0, 0b0011, None)
>>> for index in (1, 0): tree.pu(index, 1 << index, core)
>>> for index in (2, 3): tree.pu(index, 1 << index, None)  # PUs without a Core
>>> tree.placed()
({0: [[0, 1], [2]]}, [[3]])
"""

from __future__ import annotations

from chainermn_rt.errors import message_value
from chainermn_rt.slurm_records import MAX_CPUS_PER_NODE

MAX_NUMA = 1024  # Linux has at most 1,024 NUMA nodes
_HWLOC = "hwloc 2 XML of one node"


def _shown(value: int | list[int]) -> str:
    """A mask in hexadecimal, or a list, cut for a one-line message."""
    return message_value(f"{value:#x}" if isinstance(value, int) else str(value), 40)


def bits(mask: int) -> list[int]:
    """The set bits of ``mask``, lowest first (a step per bit set, not per bit).

    >>> bits(0b10110)
    [1, 2, 4]
    """
    found = []
    while mask:
        low = mask & -mask
        found.append(low.bit_length() - 1)
        mask ^= low
    return found


class Core:
    """A ``Core`` object (or a PU without one): its os_index, its cpuset, the PUs met below."""

    def __init__(self, index: int, cpus: int):
        self.index, self.cpus, self.pus = index, cpus, []


class CoreTree:
    """What the walk met, in the XML's order: NUMA nodes' cpusets, cores and their PUs."""

    def __init__(self) -> None:
        self.numa_cpus: dict[int, int] = {}
        self.cores: list[Core] = []  # a lone PU as a core of its own (cpuset its own)
        self.seen: set[int] = set()  # the PUs met

    def numa_node(self, index: int, cpus: int) -> None:
        if index in self.numa_cpus:
            raise ValueError(f"two NUMANode objects with os_index={index}; allowed: {_HWLOC}")
        if len(self.numa_cpus) == MAX_NUMA:
            raise ValueError(f"more than {MAX_NUMA} NUMANode objects; allowed: {_HWLOC}")
        self.numa_cpus[index] = cpus

    def core(self, index: int, cpus: int, within: Core | None) -> Core:
        """A ``Core`` object; ``within``: the Core above it, if any."""
        if within is not None:
            raise ValueError(f"Core os_index={index} below Core os_index={within.index}; "
                             f"allowed: {_HWLOC} (no Core within a Core)")
        self.cores.append(Core(index, cpus))
        return self.cores[-1]

    def pu(self, index: int, cpus: int, core: Core | None) -> None:
        """A PU; ``core``: the Core above it, if any."""
        if cpus != 1 << index:
            raise ValueError(f"PU os_index={index} cpuset={_shown(cpus)}; allowed: its own "
                             f"CPU alone ({_shown(1 << index)})")
        if index in self.seen:
            raise ValueError(f"two PU objects with os_index={index}; allowed: {_HWLOC}")
        self.seen.add(index)
        if core is None:
            core = Core(index, cpus)
            self.cores.append(core)
        core.pus.append(index)

    def placed(self) -> tuple[dict[int, list[list[int]]], list[list[int]]]:
        """(NUMA node -> the cores it holds, the cores no NUMA node holds), each core its PUs
        in order; ValueError for a Core without PUs or with a cpuset not theirs, or one whose
        PUs are in different NUMA nodes."""
        if sum(mask.bit_count() for mask in self.numa_cpus.values()) > 8 * MAX_CPUS_PER_NODE:
            raise ValueError(f"NUMANode cpusets that overlap past 8 NUMA nodes a CPU; allowed: "
                             f"{_HWLOC}")
        owners: dict[int, list[int]] = {}  # CPU -> the NUMA nodes holding it
        for n, mask in sorted(self.numa_cpus.items()):
            for cpu in bits(mask):
                owners.setdefault(cpu, []).append(n)
        numa: dict[int, list[list[int]]] = {n: [] for n in sorted(self.numa_cpus)}
        unplaced = []
        for core in self.cores:
            pus = sorted(core.pus)
            if not pus:
                raise ValueError(f"Core os_index={core.index} holds no PU; allowed: {_HWLOC} "
                                 "(a Core with its PUs below it)")
            if core.cpus != sum(1 << p for p in pus):
                raise ValueError(f"Core os_index={core.index} cpuset={_shown(core.cpus)}; "
                                 f"allowed: the PUs below it ({_shown(sum(1 << p for p in pus))})")
            holders = owners.get(pus[0], [])
            other = next((p for p in pus if owners.get(p, []) != holders), None)
            if other is not None:
                raise ValueError(f"Core os_index={core.index}: PU {pus[0]} in NUMA nodes "
                                 f"{_shown(holders)}, PU {other} in "
                                 f"{_shown(owners.get(other, []))}; allowed: a core whose PUs "
                                 "the same NUMA nodes' cpusets hold")
            for n in holders:
                numa[n].append(pus)
            if not holders:
                unplaced.append(pus)
        return numa, unplaced
