"""One slot per GPU, in Slurm's order, from a node's hwloc topology.

Each GPU gets its NUMA node, an even share of that node's whole cores (split between the GPUs
on it, in Slurm's order) and the HCA behind the same PCIe switch, else one on the same NUMA
node (port 1). GPUs hwloc cannot place get the node's cores round-robin, and a warning.

>>> from chainermn_rt.site_init.hwloc import FIXTURE_MINI, read
>>> found, warnings = gpu_slots(read(FIXTURE_MINI), ["0000:1b:00.0"])
>>> found, warnings
([Slot(gpu=0, numa=0, cpus='0-3', hcas=('mlx5_0:1',))], [])
"""

from __future__ import annotations

from chainermn_rt.rank_contract import Slot
from chainermn_rt.site_init.hwloc import Device, Topology


def cpu_list(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    spans: list[list[int]] = []
    for c in sorted(cpus):
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def _hca(gpu: Device, hcas: list[Device]) -> Device | None:
    """The HCA sharing the nearest PCIe bridge with ``gpu``, else the first on its NUMA node."""
    for bridge in gpu.switches:
        near = [h for h in hcas if bridge in h.switches]
        if near:
            return near[0]
    return next((h for h in hcas if gpu.numa is not None and h.numa == gpu.numa), None)


def gpu_slots(topo: Topology, order: list[str], port: int = 1) -> tuple[list[Slot], list[str]]:
    """(slots in Slurm's GPU order, warnings). ``order``: the GPUs' PCI bus ids."""
    by_busid = {g.busid.lower(): g for g in topo.gpus}
    placed = {i: by_busid.get(b.lower()) for i, b in enumerate(order)}
    warnings = [f"GPU {i}{f' ({order[i]})' if order[i] else ''}: hwloc cannot place it; it "
                "gets the node's cores round-robin" for i, g in placed.items()
                if g is None or g.numa is None]
    every_core = [c for n in sorted(topo.numa) for c in topo.numa[n]]
    unplaced = [i for i, g in placed.items() if g is None or g.numa is None]
    slots = []
    for i, gpu in placed.items():
        if i in unplaced:
            k = unplaced.index(i)  # more such GPUs than cores: they share, in turn
            cores = every_core[k::len(unplaced)] or [every_core[k % len(every_core)]]
            numa = next((n for n in sorted(topo.numa) if cores and cores[0] in topo.numa[n]), 0)
            slots.append(Slot(i, numa, cpu_list([p for c in cores for p in c])))
            continue
        peers = [j for j, g in placed.items() if j not in unplaced and g.numa == gpu.numa]
        cores = topo.numa.get(gpu.numa, [])
        share, k = len(cores) // len(peers), peers.index(i)
        mine = cores[k * share:(k + 1) * share] if share else \
            [cores[k % len(cores)]] if cores else every_core  # fewer cores than GPUs: shared
        if not share:
            warnings.append(f"GPU {i} ({order[i]}): NUMA node {gpu.numa} has {len(cores)} "
                            f"cores for {len(peers)} GPUs; they share them")
        hca = _hca(gpu, topo.hcas)
        slots.append(Slot(i, gpu.numa, cpu_list([p for c in mine for p in c]),
                          (f"{hca.name}:{port}",) if hca else ()))
    return slots, warnings
