"""A site profile's text from what a cluster reported (a pure function; ``site init``).

It writes what Slurm or the nodes answer, each with its source in a comment, and leaves
``[container]``, ``[environment]`` and ``[checks]`` as commented stubs for the administrator.
Every value is a TOML string or key of :mod:`chainermn_rt.quoting`, every comment's text
passes :func:`chainermn_rt.quoting.comment` (one line, whatever the cluster reported).

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

from dataclasses import dataclass

from chainermn_rt.errors import message_value
from chainermn_rt.quoting import comment, toml, toml_key
from chainermn_rt.rank_contract import Slot
from chainermn_rt.runtimes import NAMES, RUNTIMES


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
    slurm_version: str | None = None  # "24.11", from scontrol show config's SLURM_VERSION
    tmpfs: str | None = None  # its TmpFS
    spool_dir: str | None = None  # its SlurmdSpoolDir


def memory(mb: int) -> str:
    """``2048`` -> ``2G``; ``1000`` -> ``1000M``."""
    return f"{mb // 1024}G" if mb and mb % 1024 == 0 else f"{mb}M"


def _runtime_stub(facts: Facts) -> list[str]:
    plugins = [r.name for r in RUNTIMES.values() if r.srun_option and facts.pyxis]
    found = plugins + [r.name for c in facts.runtimes for r in RUNTIMES.values()
                       if r.command == c and not r.srun_option]
    return [
        "# [container]",
        f"# runtime = {toml(found[0] if found else 'none')}   # "
        f"{' | '.join(NAMES)}; found: {comment(', '.join(found) or 'none')}",
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
    hcas = ", ".join(toml(h, "an HCA's name") for h in slot.hcas)
    line = (f"  {{ {gpu}numa = {slot.numa}, cpus = {toml(slot.cpus, 'a CPU list')}, "
            f"hcas = [{hcas}] }},")
    return f"{line}  # {comment(busid)}" if busid else line


def profile_text(facts: Facts, sources: str) -> str:
    """The profile; ``sources``: what was asked, for the header."""
    lines = [
        f"# Written by `chainermn-rt site init` from {comment(sources)}.",
        "# Review it, fill in the commented tables, then: chainermn-rt site check FILE --live",
        f"name = {toml(facts.name, 'name')}",
        f"launcher = {toml('srun' if facts.srun_mpi else 'mpirun')}"
        f"   # srun --mpi=list: {comment(', '.join(facts.plugins) or 'nothing')}",
    ]
    if facts.srun_mpi:
        lines.append(f"srun_mpi = {toml(facts.srun_mpi, 'srun_mpi')}")
    if facts.slurm_version:
        lines.append(f"slurm_version = {toml(facts.slurm_version, 'slurm_version')}"
                     "   # scontrol show config: SLURM_VERSION")
    for key, value, said in (("slurm_tmpfs", facts.tmpfs, "TmpFS"),
                             ("slurmd_spool_dir", facts.spool_dir, "SlurmdSpoolDir")):
        if value:
            lines.append(f"{key} = {toml(value, key)}   # scontrol show config: {said}")
    if facts.socket_ifname:
        lines.append(f"socket_ifname = {toml(facts.socket_ifname, 'socket_ifname')}"
                     "   # the route to the controller, on the probed node")
    lines += ["", *_runtime_stub(facts)]
    for p in facts.partitions:
        where = f"partition {message_value(p.name)}"
        lines += ["", "[[partitions]]", f"name = {toml(p.name, 'partition')}   # "
                  f"Nodes={comment(p.node_list)}"]
        if p.default:
            lines.append("default = true")
        lines += [f"nodes = {p.nodes}", f"max_time = {toml(p.max_time, f'{where}: MaxTime')}",
                  f"cpus_per_node = {p.cpus}", f"memory = {toml(memory(p.memory_mb))}"]
        if p.gpu_type:
            lines.append(f"gpu_type = {toml(p.gpu_type, f'{where}: Gres')}")
        lines.append(f"topology = {toml(p.topology, f'{where}: topology')}")
    for t in facts.topologies:
        key = toml_key(t.name, f"topology {message_value(t.name)}")
        lines += ["", f"[topology.{key}]  # {comment(t.source)}", "slots = ["]
        lines += [_slot(s, b) for s, b in zip(t.slots, t.busids, strict=True)]
        lines.append("]")
    return "\n".join(lines) + "\n"
