"""hwloc 2 XML of made-up nodes, written as lstopo writes it, for the reader's tests: a tree of
:class:`Obj` (Machine, Package, Die, caches, Core, PU; NUMA nodes hung on an object as its
memory children, alone or below a memory-side cache) whose cpusets and nodesets :func:`xml`
computes as hwloc does, and :func:`machines`, a hypothesis strategy drawing such trees in the
shapes hwloc writes for real machines: caches between a core and its PUs at any depth (QEMU's
per-thread caches), PUs without a Core, PUs no NUMA node holds, several packages, dies and NUMA
nodes (a package's DRAM and HBM both), SMT with siblings numbered apart.

Each tree knows what the reader should find (:func:`expected`); hwloc 2.9's hwloc-calc reads
the XML without a warning (tests/test_site_init_hwloc.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

_CACHES = {"L3Cache": (3, 0), "L2Cache": (2, 0), "L1Cache": (1, 1), "L1iCache": (1, 2)}
BELOW_CORE = ["L2Cache", "L1Cache", "L1iCache"]  # the order hwloc nests them, outermost first


@dataclass
class Obj:
    kind: str
    index: int = 0
    children: list[Obj] = field(default_factory=list)
    numa: list[int] = field(default_factory=list)  # NUMA nodes hung here (os_index)
    memcache: bool = False  # each NUMA node below a memory-side cache

    def pus(self) -> list[int]:
        return [self.index] if self.kind == "PU" else [p for c in self.children
                                                       for p in c.pus()]

    def below(self) -> list[int]:
        """The NUMA nodes hung here or below."""
        return self.numa + [n for c in self.children for n in c.below()]


def _set(bits: list[int] | set[int]) -> str:
    value, words = sum(1 << b for b in set(bits)), []
    while True:
        words.append(f"0x{value & 0xffffffff:08x}")
        value >>= 32
        if not value:
            return ",".join(reversed(words))


def _sets(cpus: list[int], nodes: set[int]) -> str:
    return (f'cpuset="{_set(cpus)}" complete_cpuset="{_set(cpus)}" nodeset="{_set(nodes)}" '
            f'complete_nodeset="{_set(nodes)}"')


def _write(obj: Obj, above: set[int], depth: int) -> str:
    """``above``: the NUMA nodes hung on the ancestors (hwloc counts them local too)."""
    pad = " " * depth
    local = above | set(obj.numa)
    sets = _sets(obj.pus(), local | set(obj.below()))
    extra = ""
    if obj.kind in _CACHES:
        level, kind = _CACHES[obj.kind]
        extra = f' cache_size="{32768 << level}" depth="{level}" cache_linesize="64" ' \
                f'cache_associativity="8" cache_type="{kind}"'
    index = "" if obj.kind in _CACHES else f' os_index="{obj.index}"'
    memory = ""
    for n in obj.numa:  # NUMA nodes first, as lstopo writes them; each below its cache
        node = (f'<object type="NUMANode" os_index="{n}" {_sets(obj.pus(), {n})} '
                f'local_memory="{1 << 30}"/>')
        if obj.memcache:
            node = (f'<object type="MemCache" {_sets(obj.pus(), {n})} cache_size="{1 << 28}" '
                    f'depth="1" cache_linesize="64" cache_type="0">{node}</object>')
        memory += f"{pad} {node}\n"
    inner = memory + "".join(_write(c, local, depth + 1)
                             for c in sorted(obj.children, key=lambda c: min(c.pus())))
    head = f'{pad}<object type="{obj.kind}"{index} {sets}{extra}'
    return f"{head}>\n{inner}{pad}</object>\n" if inner else f"{head}/>\n"


def xml(machine: Obj) -> str:
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n'
            f'<topology version="2.0">\n{_write(machine, set(), 1)}</topology>\n')


def expected(machine: Obj) -> tuple[dict[int, list[list[int]]], list[list[int]]]:
    """(NUMA node -> its cores, the cores no NUMA node holds), each core its PUs sorted, in the
    XML's order (children by their first PU, as :func:`xml` writes them)."""
    numa: dict[int, list[list[int]]] = {n: [] for n in sorted(machine.below())}
    unplaced: list[list[int]] = []

    def walk(obj: Obj, holders: list[int]) -> None:
        holders = holders + obj.numa
        if obj.kind in ("Core", "PU"):
            for n in holders:
                numa[n].append(sorted(obj.pus()))
            if not holders:
                unplaced.append(sorted(obj.pus()))
            return
        for child in sorted(obj.children, key=lambda c: min(c.pus())):
            walk(child, holders)

    walk(machine, [])
    return numa, unplaced


def _chain(kinds: list[str], inner: list[Obj]) -> list[Obj]:
    for kind in reversed(kinds):
        inner = [Obj(kind, children=inner)]
    return inner


@st.composite
def _unit(draw: st.DrawFn, pus: list[Obj]) -> Obj | list[Obj]:
    """A core of 1-3 threads, or PUs without a Core; caches between it and its PUs: ``depth``
    of them, the outer ``shared`` ones holding every thread, the rest one per thread."""
    threads = draw(st.integers(1, 3))
    mine = [Obj("PU") for _ in range(threads)]
    pus.extend(mine)
    depth = draw(st.integers(0, len(BELOW_CORE)))
    kinds = BELOW_CORE[len(BELOW_CORE) - depth:]
    shared = draw(st.integers(0, depth))
    inner = [o for pu in mine for o in _chain(kinds[shared:], [pu])]
    inner = _chain(kinds[:shared], inner)
    if draw(st.booleans()):
        return Obj("Core", children=inner)
    return inner


@st.composite
def machines(draw: st.DrawFn) -> Obj:
    """A Machine > Package(s) > [Die] > [L3Cache] > cores and lone PUs, with NUMA nodes hung on
    the machine, packages or dies (none at all on some; two on one: DRAM and HBM)."""
    pus: list[Obj] = []  # in the order drawn: thread k of core c
    cores: list[Obj] = []
    places: list[Obj] = []  # where NUMA nodes may hang
    machine = Obj("Machine")
    places.append(machine)
    for p in range(draw(st.integers(1, 3))):
        package = Obj("Package", p)
        machine.children.append(package)
        places.append(package)
        holders = [package]
        if draw(st.booleans()):
            holders = [Obj("Die", 2 * p + d) for d in range(draw(st.integers(1, 2)))]
            package.children.extend(holders)
            places.extend(holders)
        for holder in holders:
            units = []
            for _ in range(draw(st.integers(1, 3))):
                before = len(pus)
                unit = draw(_unit(pus))
                units.extend(unit if isinstance(unit, list) else [unit])
                cores.append(pus[before:])
            holder.children.extend([Obj("L3Cache", children=units)] if draw(st.booleans())
                                   else units)
    counts = draw(st.lists(st.integers(0, 2), min_size=len(places), max_size=len(places))
                  .filter(any))
    indexes = iter(draw(st.permutations(range(sum(counts)))))
    for place, count in zip(places, counts, strict=True):
        place.numa = [next(indexes) for _ in range(count)]
        place.memcache = count > 0 and draw(st.booleans())
    # PU numbers: in order, or SMT siblings apart (thread k of core c is c + k * cores)
    if draw(st.booleans()):
        order = sorted(range(len(pus)), key=lambda i: next(
            (k, c) for c, core in enumerate(cores) for k, pu in enumerate(core) if pu is pus[i]))
    else:
        order = list(range(len(pus)))
    for number, i in enumerate(order):
        pus[i].index = number
    return machine
