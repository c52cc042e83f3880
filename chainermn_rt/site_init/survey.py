"""Ask a running cluster what a site profile needs (``chainermn-rt site init``).

Slurm's controller answers for partitions, nodes and MPI plugins (``scontrol``, ``srun
--mpi=list``, ``srun --help``); each node shape (CPUs, memory, Gres) of the chosen partitions
answers for its hardware, through one one-task ``srun`` step running :data:`probe.SCRIPT` on
one of its nodes. :func:`survey` returns the facts and one-line warnings; the profile's text
is :func:`chainermn_rt.site_init.profile.profile_text`.

Errors: an unknown partition is a UserError (exit 2); Slurm unreachable or a failed step an
EnvironmentProblem (3); a cluster no profile can describe (a partition of mixed node shapes,
GPU counts that disagree) JobFailed (1).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, replace

from chainermn_rt.errors import EnvironmentProblem, JobFailed, UserError
from chainermn_rt.rank_contract import Slot
from chainermn_rt.site import parse_time
from chainermn_rt.site_init import hwloc, nvidia, probe
from chainermn_rt.site_init.profile import Facts, PartitionFacts, TopologyFacts
from chainermn_rt.site_init.slots import cpu_list, gpu_slots
from chainermn_rt.slurm_client import Slurm
from chainermn_rt.slurm_records import config, gres_gpu_type, gres_gpus

UNLIMITED_AS = "365-00:00:00"  # a profile needs a max_time; Slurm's UNLIMITED becomes this
_UNUSABLE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "FUTURE")


@dataclass(frozen=True)
class Shape:
    cpus: int
    memory_mb: int
    gres: str

    def describe(self) -> str:
        return f"{self.cpus} CPUs, {self.memory_mb} MB, Gres={self.gres or '(null)'}"


def _shape(node: dict[str, str]) -> Shape:
    gres = node.get("Gres", "")
    return Shape(int(node.get("CPUTot", "0") or 0), int(node.get("RealMemory", "0") or 0),
                 "" if gres == "(null)" else gres)


def controller_address(conf: dict[str, str]) -> str:
    """``SlurmctldHost[0] = head(10.0.0.1)`` -> ``10.0.0.1`` (else the host name).

    >>> controller_address({"SlurmctldHost[0]": "head(10.0.0.1)"})
    '10.0.0.1'
    """
    host = conf.get("SlurmctldHost[0]", conf.get("ControlMachine", ""))
    m = re.match(r"([^(]*)(?:\((.*)\))?", host)
    return (m.group(2) or m.group(1)).strip()


def mpi_plugins(text: str) -> tuple[str, ...]:
    """``srun --mpi=list``'s plugin names (Slurm 22.05 prefixes each line with ``srun:``)."""
    words = re.findall(r"^\s*(?:srun: )?([a-z][a-z0-9_]*)\s*$", text, re.M)
    return tuple(w for w in words if w not in ("mpi", "types", "are"))


def _probe(slurm: Slurm, partition: str, node: str, controller: str) -> probe.NodeReport:
    argv = ["srun", "-N1", "-n1", "--exclusive", f"--partition={partition}", f"--nodelist={node}",
            "--time=5", "--job-name=chainermn-rt-site-init", "sh", "-c", probe.SCRIPT, "sh",
            controller]
    try:
        proc = slurm.run(argv, timeout=600)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"{node}: the probe step (srun -N1 --exclusive -w {node}) did "
                                 "not end within 600 s; is the node busy?") from None
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise EnvironmentProblem(f"{node}: the probe step failed (exit {proc.returncode}): "
                                 f"{said[-1] if said else 'no message'}")
    try:
        return probe.parse(proc.stdout)
    except ValueError as err:
        raise EnvironmentProblem(f"{node}: {err}") from None


def _gpu_order(node: str, shape: Shape, report: probe.NodeReport, topo: hwloc.Topology,
               warnings: list[str]) -> list[str]:
    """PCI bus ids in Slurm's GPU order ("" where unknown); JobFailed when counts disagree."""
    want = gres_gpus(shape.gres)
    if report.nvidia_information:
        minors = [nvidia.read_information(text) for text in report.nvidia_information]
        if len(minors) != want:
            raise JobFailed(f"{node}: Slurm has {want} GPUs (Gres={shape.gres}), the NVIDIA "
                            f"driver lists {len(minors)}")
        order = nvidia.slurm_order(minors)
        if order != sorted(order):
            warnings.append(f"{node}: the GPUs' device minors do not follow their PCI order "
                            "(NVML's index): the slots follow the minors, as Slurm does")
        return order
    if topo.gpus and len(topo.gpus) != want:
        raise JobFailed(f"{node}: Slurm has {want} GPUs (Gres={shape.gres}), hwloc sees "
                        f"{len(topo.gpus)}")
    if topo.gpus:
        warnings.append(f"{node}: no /proc/driver/nvidia/gpus: GPU order taken as hwloc's "
                        "PCI order")
        return [g.busid for g in topo.gpus]
    warnings.append(f"{node}: the GPU topology is unknown (hwloc sees no NVIDIA GPU)")
    return [""] * want


def _cross_check(node: str, report: probe.NodeReport, made: list[Slot],
                 warnings: list[str]) -> None:
    """``nvidia-smi topo -m``'s NUMA affinity against hwloc's, where the node has it."""
    for index, row in nvidia.topo_matrix(report.nvidia_smi_topo).items():
        said = row.get("NUMA Affinity", "")
        if index < len(made) and said.isdigit() and int(said) != made[index].numa:
            warnings.append(f"{node}: GPU {index}: nvidia-smi topo -m says NUMA node {said}, "
                            f"hwloc {made[index].numa}")


def _topology(name: str, node: str, shape: Shape, report: probe.NodeReport,
              warnings: list[str]) -> TopologyFacts:
    try:
        topo = hwloc.read(report.lstopo_xml)
    except ValueError as err:
        raise EnvironmentProblem(f"{node}: lstopo --whole-system --of xml gave no topology "
                                 f"({err}); install hwloc there") from None
    pus = sum(len(core) for cores in topo.numa.values() for core in cores)
    if pus != shape.cpus:
        warnings.append(f"{node}: Slurm has {shape.cpus} CPUs, hwloc sees {pus}")
    source = f"{node}: {shape.describe()}"
    if not gres_gpus(shape.gres):  # CPU nodes: one slot per NUMA node, its whole cores
        made = [Slot(None, n, cpu_list([p for c in cores for p in c]))
                for n, cores in sorted(topo.numa.items()) if cores]
        return TopologyFacts(name, tuple(made), ("",) * len(made), source)
    order = _gpu_order(node, shape, report, topo, warnings)
    made, more = gpu_slots(topo, order)
    warnings += [f"{node}: {line}" for line in more]
    made = _active_ports(node, report, made, warnings)
    _cross_check(node, report, made, warnings)
    return TopologyFacts(name, tuple(made), tuple(order), source)


def _active_ports(node: str, report: probe.NodeReport, made: list[Slot],
                  warnings: list[str]) -> list[Slot]:
    """Each slot's HCA on its first ACTIVE port, as /sys/class/infiniband says (port 1 where
    the node said nothing of that HCA; a warning where none of its ports is active)."""
    ports: dict[str, list[tuple[int, str]]] = {}
    for device, port, state, _rate, _link in report.ib_ports:
        ports.setdefault(device, []).append((port, state))
    fixed = []
    for slot in made:
        hcas = []
        for hca in slot.hcas:
            device = hca.rsplit(":", 1)[0]
            active = [p for p, state in sorted(ports.get(device, [])) if "ACTIVE" in state]
            if device in ports and not active:
                warnings.append(f"{node}: {device}, GPU {slot.gpu}'s HCA, has no ACTIVE port")
            hcas.append(f"{device}:{active[0]}" if active else hca)
        fixed.append(replace(slot, hcas=tuple(hcas)))
    return fixed


def survey(slurm: Slurm, wanted: list[str], name: str | None = None
           ) -> tuple[Facts, list[str], list[str]]:
    """(facts, warnings, the Slurm steps run) for the partitions ``wanted``."""
    conf = config(slurm.output(["scontrol", "show", "config"]))
    parts = slurm.listing("partition")
    for p in wanted:
        if p not in parts:
            raise UserError(f"--partition: {p!r} is not a partition of this cluster; allowed: "
                            + ", ".join(sorted(parts)))
    nodes = slurm.listing("node")
    listed = slurm.run(["srun", "--mpi=list"], timeout=30)
    plugins = mpi_plugins(listed.stdout + listed.stderr)
    pyxis = "--container-image" in slurm.run(["srun", "--help"], timeout=30).stdout
    controller = controller_address(conf)
    warnings: list[str] = []
    steps: list[str] = []
    shapes: dict[Shape, TopologyFacts] = {}
    reports: dict[str, probe.NodeReport] = {}  # by Slurm's node name
    partitions = []
    for p in wanted:
        record = parts[p]
        names = slurm.hostnames(record.get("Nodes", ""))
        if not names:
            raise JobFailed(f"partition {p}: it has no nodes")
        by_shape: dict[Shape, list[str]] = {}
        for node in names:
            by_shape.setdefault(_shape(nodes.get(node, {})), []).append(node)
        if len(by_shape) > 1:
            raise JobFailed(f"partition {p}: its nodes differ ("
                            + "; ".join(f"{v[0]}: {k.describe()}" for k, v in by_shape.items())
                            + "); a profile's partition has one node shape")
        shape, members = next(iter(by_shape.items()))
        if shape not in shapes:
            node = next((n for n in members if not any(
                word in nodes.get(n, {}).get("State", "") for word in _UNUSABLE)), members[0])
            report = _probe(slurm, p, node, controller)
            steps.append(f"srun -N1 --exclusive -p {p} -w {node}")
            reports[node] = report
            shapes[shape] = _topology(p, node, shape, report, warnings)
        max_time = record.get("MaxTime", "UNLIMITED")
        if max_time.upper() in ("UNLIMITED", "INFINITE"):
            warnings.append(f"partition {p}: MaxTime is UNLIMITED; written as {UNLIMITED_AS}")
            max_time = UNLIMITED_AS
        parse_time(max_time, f"partition {p} MaxTime")
        partitions.append(PartitionFacts(
            p, record.get("Default", "NO") == "YES", len(names), max_time, shape.cpus,
            shape.memory_mb, gres_gpu_type(shape.gres), shapes[shape].name,
            record.get("Nodes", "")))
    if pyxis:
        missing = [node for node, r in reports.items() if "enroot" in r.runtimes
                   and probe.PMI_HOOK not in r.enroot_hooks]
        for host in missing:
            warnings.append(f"{host}: pyxis without enroot's {probe.PMI_HOOK} hook in "
                            "/etc/enroot/hooks.d: multi-node srun --mpi=pmix fails in containers"
                            " (copy it from enroot's hooks.d examples)")
    srun_mpi = "pmix" if any(x.startswith("pmix") for x in plugins) else \
        "pmi2" if "pmi2" in plugins else None
    if srun_mpi is None:
        warnings.append("srun offers neither pmix nor pmi2: launcher mpirun")
    ifnames = {r.socket_ifname for r in reports.values()}
    facts = Facts(
        name=name or conf.get("ClusterName", "cluster"), srun_mpi=srun_mpi, plugins=plugins,
        socket_ifname=ifnames.pop() if len(ifnames) == 1 else None,
        runtimes=tuple(sorted({x for r in reports.values() for x in r.runtimes})), pyxis=pyxis,
        partitions=tuple(partitions), topologies=tuple(shapes.values()))
    return facts, warnings, steps
