"""Compare a site profile with the running cluster (``chainermn-rt site check --live``).

>>> compare(load_site("slurm/sites/sandbox.toml"), Slurm())     # doctest: +SKIP
[]          # or e.g. ["partition gpu: nodes 2 in the profile, 3 in Slurm"]

A client command that fails (Slurm unreachable) raises EnvironmentProblem with its message.
"""

from __future__ import annotations

import re

from chainermn_rt.site import Site, parse_time
from chainermn_rt.slurm_client import Slurm
from chainermn_rt.slurm_records import gres_gpus


def _time(text: str) -> int | None:
    return None if text.upper() in ("UNLIMITED", "INFINITE") else parse_time(text, "MaxTime")


def compare(site: Site, slurm: Slurm) -> list[str]:
    """Every difference between the profile and Slurm's view, one line each."""
    diffs: list[str] = []
    partitions, nodes = slurm.listing("partition"), slurm.listing("node")
    for p in site.partitions:
        live = partitions.get(p.name)
        if live is None:
            diffs.append(f"partition {p.name}: not in Slurm (it has: "
                         f"{', '.join(sorted(partitions))})")
            continue
        total = int(live.get("TotalNodes", "0"))
        if total != p.nodes:
            diffs.append(f"partition {p.name}: nodes {p.nodes} in the profile, {total} in Slurm")
        max_time = _time(live.get("MaxTime", "UNLIMITED"))
        if max_time != p.max_time_s:
            diffs.append(f"partition {p.name}: max_time {p.max_time} in the profile, "
                         f"{live.get('MaxTime')} in Slurm")
        names = slurm.hostnames(live.get("Nodes", ""))
        for name in names:
            node = nodes.get(name, {})
            cpus, gpus = int(node.get("CPUTot", "0")), gres_gpus(node.get("Gres", ""))
            if cpus != p.cpus_per_node:
                diffs.append(f"node {name}: cpus_per_node {p.cpus_per_node} in the profile "
                             f"(partition {p.name}), CPUTot={cpus} in Slurm")
            # A CPU-only topology may run on GPU nodes; a GPU topology must match them.
            if p.topology.gpus and gpus != p.topology.gpus:
                diffs.append(f"node {name}: {p.topology.gpus} GPUs in topology "
                             f"{p.topology.name!r}, Gres={node.get('Gres', '(none)')} in Slurm")
            mem = int(node.get("RealMemory", "0"))
            if p.memory_mb is not None and mem != p.memory_mb:
                diffs.append(f"node {name}: memory {p.memory_mb}M in the profile, "
                             f"RealMemory={mem} in Slurm")
    if site.launcher == "srun":
        plugins = slurm.run(["srun", "--mpi=list"], timeout=30)
        listed = re.findall(r"^\s*(?:srun: )?(\S+)\s*$", plugins.stdout + plugins.stderr, re.M)
        if site.srun_mpi not in listed:
            diffs.append(f"srun_mpi {site.srun_mpi!r}: not among srun --mpi=list's plugins "
                         f"({', '.join(x for x in listed if x.isidentifier())})")
    return diffs

