"""Compare a site profile with the running cluster (``chainermn-rt site check --live``).

>>> compare(load_site("slurm/sites/sandbox.toml"), Slurm())     # doctest: +SKIP
[]          # or e.g. ["partition gpu: nodes 2 in the profile, 3 in Slurm"]

A client command that fails (Slurm unreachable), and an answer that is not Slurm's
(``CPUTot=abc``), raise EnvironmentProblem (exit 3): the latter names the node or partition
and the field. With runtime ``pyxis``, one step on every node of the profile's partitions runs
enroot (:mod:`chainermn_rt.runtimes.enroot_probe`): nodes where it cannot run are one
EnvironmentProblem, each node named with what is missing.
"""

from __future__ import annotations

from chainermn_rt.errors import EnvironmentProblem, UserError, message_value
from chainermn_rt.runtimes import RUNTIMES, enroot_probe
from chainermn_rt.site import MAX_NODES, Site
from chainermn_rt.slurm_client import NoAnswer, Slurm, whole
from chainermn_rt.slurm_records import MAX_CPUS_PER_NODE, MAX_MEMORY_MB, config, gres_gpus
from chainermn_rt.slurm_rules import parse_time, slurm_version


def _time(text: str, where: str) -> int | None:
    try:
        return None if text.upper() in ("UNLIMITED", "INFINITE") else parse_time(text, where)
    except UserError as err:  # the rule is the profile's; the value came from Slurm
        raise EnvironmentProblem(str(err)) from None


def compare(site: Site, slurm: Slurm, notes: list[str] | None = None) -> list[str]:
    """Every difference between the profile and Slurm's view, one line each; an
    EnvironmentProblem naming the node or partition and the field where Slurm's answer is not a
    value at all. ``notes`` gets a line for each node left unchecked (enroot is asked only on
    nodes a step reaches)."""
    notes = [] if notes is None else notes
    asks = RUNTIMES[site.container.runtime].command == "enroot"
    diffs: list[str] = []
    partitions, nodes = slurm.listing("partition"), slurm.listing("node")
    probe: dict[str, list[str]] = {}  # partition -> its nodes no other partition probes
    unasked: set[str] = set()
    for p in site.partitions:
        live = partitions.get(p.name)
        if live is None:
            diffs.append(f"partition {p.name}: not in Slurm (it has: "
                         f"{', '.join(message_value(k) for k in sorted(partitions))})")
            continue
        where = f"partition {p.name}"
        total = whole(live, "TotalNodes", MAX_NODES, where)
        if total != p.nodes:
            diffs.append(f"partition {p.name}: nodes {p.nodes} in the profile, {total} in Slurm")
        max_time = _time(live.get("MaxTime", "UNLIMITED"), f"{where}: MaxTime")
        if max_time != p.max_time_s:
            diffs.append(f"partition {p.name}: max_time {p.max_time} in the profile, "
                         f"{live.get('MaxTime')} in Slurm")
        try:
            names = slurm.hostnames(live.get("Nodes", ""))
        except EnvironmentProblem as err:
            raise EnvironmentProblem(f"{where}: {err}") from None
        for name in names:
            node, at = nodes.get(name), f"node {name}"
            if node is None:
                diffs.append(f"{at}: in partition {p.name}'s Nodes, not in scontrol show node")
                continue
            usable = not any(w in node.get("State", "") for w in _UNUSABLE)
            if usable and not any(name in v for v in probe.values()):
                probe.setdefault(p.name, []).append(name)
            elif not usable and asks and name not in unasked:
                unasked.add(name)
                notes.append(f"{at}: {message_value(node.get('State', ''))}: enroot not asked "
                             "(no step reaches it)")
            cpus = whole(node, "CPUTot", MAX_CPUS_PER_NODE, at)
            try:
                gpus = gres_gpus(node.get("Gres", ""))
            except ValueError as err:
                raise EnvironmentProblem(f"{at}: Gres={message_value(node['Gres'])}: "
                                         f"{err}") from None
            if cpus != p.cpus_per_node:
                diffs.append(f"node {name}: cpus_per_node {p.cpus_per_node} in the profile "
                             f"(partition {p.name}), CPUTot={cpus} in Slurm")
            # A CPU-only topology may run on GPU nodes; a GPU topology must match them.
            if p.topology.gpus and gpus != p.topology.gpus:
                diffs.append(f"node {name}: {p.topology.gpus} GPUs in topology "
                             f"{p.topology.name!r}, Gres="
                             f"{message_value(node.get('Gres', '(none)'))} in Slurm")
            mem = whole(node, "RealMemory", MAX_MEMORY_MB, at)
            if p.memory_mb is not None and mem != p.memory_mb:
                diffs.append(f"node {name}: memory {p.memory_mb}M in the profile, "
                             f"RealMemory={mem} in Slurm")
    if site.slurm_version is not None:
        running = slurm_version(config(slurm.output(["scontrol", "show", "config"])))
        if running != "{:02d}.{:02d}".format(*site.slurm_release):
            diffs.append(f"slurm_version {site.slurm_version} in the profile, "
                         f"{running or 'none named'} in scontrol show config")
    if site.launcher == "srun":
        listed = slurm.mpi_plugins()
        if site.srun_mpi not in listed:
            diffs.append(f"srun_mpi {site.srun_mpi!r}: not among srun --mpi=list's plugins "
                         f"({', '.join(listed)})")
    if asks:
        check_enroot(slurm, probe)
    return diffs


PROBE_S = 300  # seconds the enroot step may take, waiting for its nodes included
_UNUSABLE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "FUTURE")  # nodes no step reaches


def check_enroot(slurm: Slurm, probe: dict[str, list[str]]) -> None:
    """One step per partition, one task on each of ``probe``'s nodes (those up), running enroot;
    EnvironmentProblem naming each node where it cannot run, and what is missing."""
    broken = []
    for partition, names in probe.items():
        argv = ["srun", f"-N{len(names)}", "--ntasks-per-node=1", f"--partition={partition}",
                f"--nodelist={','.join(names)}", "--time=2", "--label",
                "--job-name=chainermn-rt-site-check", "sh", "-c", enroot_probe.NODE_SCRIPT]
        try:
            proc = slurm.run(argv, timeout=PROBE_S)
        except NoAnswer:
            raise EnvironmentProblem(f"partition {partition}: the enroot step did not end "
                                     f"within {PROBE_S} s; are its nodes busy?") from None
        said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        if proc.returncode != 0:
            raise EnvironmentProblem(f"partition {partition}: the enroot step failed (exit "
                                     f"{proc.returncode}): "
                                     f"{message_value(said[-1]) if said else 'no message'}")
        try:
            reports = enroot_probe.by_node(proc.stdout)
        except ValueError as err:
            raise EnvironmentProblem(f"partition {partition}: the enroot step: {err}") from None
        broken += [enroot_probe.cannot_run(n, r) for n, r in sorted(reports.items())
                   if r.problems]
    if broken:
        raise EnvironmentProblem("; ".join(broken))
