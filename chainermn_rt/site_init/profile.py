"""A site profile's text from what a cluster reported (a pure function; ``site init``).

It writes what Slurm or the nodes answer, each with its source in a comment, and leaves
``[container]``, ``[environment]`` and ``[checks]`` as commented stubs for the administrator.

>>> from chainermn_rt.rank_contract import Slot
>>> facts = Facts(name="lab", srun_mpi="pmix", plugins=("none", "pmix"), socket_ifname=None,
...               runtimes=(), pyxis=False, partitions=(PartitionFacts(
...                   "gpu", True, 2, "01:00:00", 4, 2048, None, "gpu", "node[1-2]"),),
...               topologies=(TopologyFacts("gpu", (Slot(0, 0, "0-3"),), ("0000:1b:00.0",),
...                                         "node1: 4 CPUs, 2048 MB, Gres=gpu:1"),))
>>> print(profile_text(facts, "scontrol; a probe on node1"))  # doctest: +ELLIPSIS
# Written by `chainermn-rt site init` from scontrol; a probe on node1.
...
[topology.gpu]  # node1: 4 CPUs, 2048 MB, Gres=gpu:1
slots = [
  { gpu = 0, numa = 0, cpus = "0-3", hcas = [] },  # 0000:1b:00.0
]
<BLANKLINE>
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from chainermn_rt.rank_contract import Slot
from chainermn_rt.site import RUNTIMES


@dataclass(frozen=True)
class PartitionFacts:
    name: str
    default: bool
    nodes: int
    max_time: str  # a Slurm time parse_time accepts
    cpus: int  # Slurm's CPUTot of each node
    memory_mb: int  # Slurm's RealMemory
    gpu_type: str | None
    topology: str
    node_list: str  # Slurm's Nodes=, for the comment


@dataclass(frozen=True)
class TopologyFacts:
    name: str
    slots: tuple[Slot, ...]
    busids: tuple[str, ...]  # per slot: the GPU's PCI bus id, "" where unknown
    source: str  # which node, and its shape


@dataclass(frozen=True)
class Facts:
    name: str
    srun_mpi: str | None  # None: srun offers neither pmix nor pmi2 (launcher mpirun)
    plugins: tuple[str, ...]  # srun --mpi=list
    socket_ifname: str | None
    runtimes: tuple[str, ...]  # found on the probed nodes
    pyxis: bool
    partitions: tuple[PartitionFacts, ...]
    topologies: tuple[TopologyFacts, ...]


def _q(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)


def memory(mb: int) -> str:
    """``2048`` -> ``2G``; ``1000`` -> ``1000M``."""
    return f"{mb // 1024}G" if mb and mb % 1024 == 0 else f"{mb}M"


def _runtime_stub(facts: Facts) -> list[str]:
    found = (["pyxis"] if facts.pyxis else []) + [
        {"ch-run": "charliecloud"}.get(r, r) for r in facts.runtimes if r != "enroot"]
    return [
        "# [container]",
        f"# runtime = {_q(found[0] if found else 'none')}   # {' | '.join(RUNTIMES)}; found: "
        f"{', '.join(found) or 'none'}",
        "# image = \"/shared/images/chainermn-rt_gpu\"   # `make image`, then `chainermn-rt "
        "install` (docs/install.md)",
        "# binds = [\"/shared:/shared\"]",
        "",
        "# [environment]                 # exported in every job script",
        "# NCCL_SOCKET_IFNAME = \"...\"",
        "",
        "# [checks]                      # after a first `chainermn-rt doctor --site FILE` run",
        "# allreduce_busbw_gbps = 0.0",
    ]


def _slot(slot: Slot, busid: str) -> str:
    gpu = "" if slot.gpu is None else f"gpu = {slot.gpu}, "
    hcas = ", ".join(_q(h) for h in slot.hcas)
    line = f"  {{ {gpu}numa = {slot.numa}, cpus = {_q(slot.cpus)}, hcas = [{hcas}] }},"
    return f"{line}  # {busid}" if busid else line


def profile_text(facts: Facts, sources: str) -> str:
    """The profile; ``sources``: what was asked, for the header."""
    lines = [
        f"# Written by `chainermn-rt site init` from {sources}.",
        "# Review it, fill in the commented tables, then: chainermn-rt site check FILE --live",
        f"name = {_q(facts.name)}",
        f"launcher = {_q('srun' if facts.srun_mpi else 'mpirun')}"
        f"   # srun --mpi=list: {', '.join(facts.plugins) or 'nothing'}",
    ]
    if facts.srun_mpi:
        lines.append(f"srun_mpi = {_q(facts.srun_mpi)}")
    if facts.socket_ifname:
        lines.append(f"socket_ifname = {_q(facts.socket_ifname)}"
                     "   # the route to the controller, on the probed node")
    lines += ["", *_runtime_stub(facts)]
    for p in facts.partitions:
        lines += ["", "[[partitions]]", f"name = {_q(p.name)}   # Nodes={p.node_list}"]
        if p.default:
            lines.append("default = true")
        lines += [f"nodes = {p.nodes}", f"max_time = {_q(p.max_time)}",
                  f"cpus_per_node = {p.cpus}", f"memory = {_q(memory(p.memory_mb))}"]
        if p.gpu_type:
            lines.append(f"gpu_type = {_q(p.gpu_type)}")
        lines.append(f"topology = {_q(p.topology)}")
    for t in facts.topologies:
        key = t.name if re.fullmatch(r"[A-Za-z0-9_-]+", t.name) else _q(t.name)
        lines += ["", f"[topology.{key}]  # {t.source}", "slots = ["]
        lines += [_slot(s, b) for s, b in zip(t.slots, t.busids, strict=True)]
        lines.append("]")
    return "\n".join(lines) + "\n"
