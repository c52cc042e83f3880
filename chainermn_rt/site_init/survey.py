"""Ask a running cluster what a site profile needs (``chainermn-rt site init``).

Slurm's controller answers for partitions, nodes and MPI plugins (``scontrol``, ``srun
--mpi=list``, ``srun --help``); each node shape (CPUs, memory, Gres) of the chosen partitions
answers for its hardware, through one one-task ``srun`` step running :data:`node_report.SCRIPT` on
one of its nodes. :func:`survey` returns the facts and one-line warnings; the profile's text
is :func:`chainermn_rt.site_init.profile.profile_text`.

Everything Slurm and the nodes answer is untrusted: read bounded and decoded with
replacement (:class:`~chainermn_rt.slurm_client.Slurm`), then checked field by field.

Errors: only the person's input is a UserError (exit 2): an unknown ``--partition``. An answer
that is not what Slurm or the probe prints (a non-numeric ``CPUTot``, a Gres past 64 GPUs,
truncated or foreign lstopo XML, a driver file without ``Device Minor``, no MPI plugin from
``srun --mpi=list``) is the environment's, as are Slurm unreachable, a command that does not
answer in time, a failed or cut-short step and hwloc missing: EnvironmentProblem (3) naming the
command, or the node and the field. Answers that are each sound but describe a cluster no
profile can describe (a partition of mixed node shapes, a node Slurm's partition names but does
not describe, GPU counts that disagree, CPUs hwloc numbers past Slurm's CPUTot) are a finding:
JobFailed (1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from chainermn_rt.errors import EnvironmentProblem, JobFailed, UserError, message_value
from chainermn_rt.rank_contract import Slot
from chainermn_rt.runtimes import RUNTIMES, enroot_probe
from chainermn_rt.site import NAME
from chainermn_rt.site_init import hwloc, node_report, nvidia
from chainermn_rt.site_init.profile import Facts, PartitionFacts, TopologyFacts
from chainermn_rt.site_init.slots import cpu_list, gpu_slots
from chainermn_rt.slurm_client import ANSWER_S, NoAnswer, Slurm, whole
from chainermn_rt.slurm_records import (
    MAX_CPUS_PER_NODE,
    MAX_MEMORY_MB,
    config,
    gres_gpu_type,
    gres_gpus,
)
from chainermn_rt.slurm_rules import check_node_folder, parse_time, slurm_version

PYXIS = RUNTIMES["pyxis"]  # a Slurm plugin: found in srun --help

PROBE_S = 600  # seconds the probe step may take, waiting for its node included
UNLIMITED_AS = "365-00:00:00"  # a profile needs a max_time; Slurm's UNLIMITED becomes this
_UNUSABLE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "FUTURE")


@dataclass(frozen=True)
class Shape:
    cpus: int
    memory_mb: int
    gres: str

    def describe(self) -> str:
        return f"{self.cpus} CPUs, {self.memory_mb} MB, Gres={message_value(self.gres or '(null)')}"

    @property
    def gpus(self) -> int:
        return gres_gpus(self.gres)  # checked when the shape was read


def _shape(name: str, node: dict[str, str] | None) -> Shape:
    """A node's CPUs, memory and Gres from ``scontrol show node``; EnvironmentProblem naming
    the node and the field when one is missing, not a number, too large, or a Gres no node has;
    JobFailed for a node Slurm does not describe."""
    where = f"node {name}"
    if node is None:
        raise JobFailed(f"{where}: in a partition's Nodes but not in scontrol show node")
    gres = node.get("Gres", "")
    gres = "" if gres == "(null)" else gres
    try:
        gres_gpus(gres)
        kind = gres_gpu_type(gres)
    except ValueError as err:
        raise EnvironmentProblem(f"{where}: Gres={message_value(gres)}: {err}") from None
    if kind is not None and not NAME.match(kind):
        raise EnvironmentProblem(f"{where}: Gres={message_value(gres)}: GPU type "
                                 f"{message_value(kind)}; allowed: letters, digits, '.', '_', "
                                 "'-'")
    cpus = whole(node, "CPUTot", MAX_CPUS_PER_NODE, where)
    if cpus == 0:
        raise EnvironmentProblem(f"{where}: CPUTot=0; allowed: a whole number "
                                 f"1-{MAX_CPUS_PER_NODE}")
    return Shape(cpus, whole(node, "RealMemory", MAX_MEMORY_MB, where), gres)


_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,253}\Z")  # a host name or an IP address


def controller_address(conf: dict[str, str]) -> str:
    """``SlurmctldHost[0] = head(10.0.0.1)`` -> ``10.0.0.1`` (else the host name);
    EnvironmentProblem when it is not a host name or address (``scontrol show config`` answered
    something that is not Slurm's configuration).

    >>> controller_address({"SlurmctldHost[0]": "head(10.0.0.1)"})
    '10.0.0.1'
    """
    host = conf.get("SlurmctldHost[0]", conf.get("ControlMachine", ""))
    m = re.match(r"([^(]*)(?:\((.*)\))?", host)
    address = (m.group(2) or m.group(1)).strip()
    if not _HOST.match(address):
        said = f"SlurmctldHost[0]={message_value(host)}" if host else "no SlurmctldHost[0]"
        raise EnvironmentProblem(f"scontrol show config: {said}; allowed: a host name or an IP "
                                 "address, e.g. head(10.0.0.1)")
    return address


def _probe(slurm: Slurm, partition: str, node: str, controller: str) -> node_report.NodeReport:
    argv = ["srun", "-N1", "-n1", "--exclusive", f"--partition={partition}", f"--nodelist={node}",
            "--time=5", "--job-name=chainermn-rt-site-init", "sh", "-c", node_report.SCRIPT, "sh",
            controller]
    try:
        proc = slurm.run(argv, timeout=PROBE_S)
    except NoAnswer:
        raise EnvironmentProblem(f"{node}: the probe step (srun -N1 --exclusive -w {node}) did "
                                 f"not end within {PROBE_S} s; is the node busy?") from None
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise EnvironmentProblem(f"{node}: the probe step failed (exit {proc.returncode}): "
                                 f"{message_value(said[-1]) if said else 'no message'}")
    try:
        return node_report.parse(proc.stdout)
    except node_report.Unfinished as err:
        raise EnvironmentProblem(f"{node}: {err}") from None
    except ValueError as err:
        raise EnvironmentProblem(f"{node}: the probe's answer: {err}") from None


def _gpu_order(node: str, shape: Shape, report: node_report.NodeReport, topo: hwloc.Topology,
               warnings: list[str]) -> list[str]:
    """PCI bus ids in Slurm's GPU order ("" where unknown); JobFailed when counts disagree."""
    want = shape.gpus
    if report.nvidia_information:
        minors = []
        for i, text in enumerate(report.nvidia_information):
            try:
                minors.append(nvidia.read_information(text))
            except ValueError as err:
                raise EnvironmentProblem(
                    f"{node}: /proc/driver/nvidia/gpus/*/information (GPU file {i + 1} of "
                    f"{len(report.nvidia_information)}): {err}") from None
        for k, what in ((0, "PCI bus id"), (1, "device minor")):
            seen = [m[k] for m in minors]
            if len(set(seen)) != len(seen):
                raise EnvironmentProblem(f"{node}: /proc/driver/nvidia/gpus/*/information: two"
                                         f" GPUs with one {what}; allowed: each GPU's own")
        if len(minors) != want:
            raise JobFailed(f"{node}: Slurm has {want} GPUs (Gres={message_value(shape.gres)}), "
                            f"the NVIDIA driver lists {len(minors)}")
        order = nvidia.slurm_order(minors)
        if order != sorted(order):
            warnings.append(f"{node}: the GPUs' device minors do not follow their PCI order "
                            "(NVML's index): the slots follow the minors, as Slurm does")
        return order
    if topo.gpus and len(topo.gpus) != want:
        raise JobFailed(f"{node}: Slurm has {want} GPUs (Gres={message_value(shape.gres)}), "
                        f"hwloc sees {len(topo.gpus)}")
    if topo.gpus:
        warnings.append(f"{node}: no /proc/driver/nvidia/gpus: GPU order taken as hwloc's "
                        "PCI order")
        return [g.busid for g in topo.gpus]
    warnings.append(f"{node}: the GPU topology is unknown (hwloc sees no NVIDIA GPU)")
    return [""] * want


def _cross_check(node: str, report: node_report.NodeReport, made: list[Slot],
                 warnings: list[str]) -> None:
    """``nvidia-smi topo -m``'s NUMA affinity against hwloc's, where the node has it."""
    for index, row in nvidia.topo_matrix(report.nvidia_smi_topo).items():
        try:
            said = nvidia.numa_affinity(row)
        except ValueError as err:
            raise EnvironmentProblem(f"{node}: nvidia-smi topo -m: GPU{index}: {err}") from None
        if index < len(made) and said is not None and said != made[index].numa:
            warnings.append(f"{node}: GPU {index}: nvidia-smi topo -m says NUMA node {said}, "
                            f"hwloc {made[index].numa}")


def _topology(name: str, node: str, shape: Shape, report: node_report.NodeReport,
              warnings: list[str]) -> TopologyFacts:
    lstopo = "lstopo --whole-system --of xml"
    if not report.lstopo_xml.strip():
        raise EnvironmentProblem(f"{node}: {lstopo} gave no topology; install hwloc there")
    try:
        topo = hwloc.read(report.lstopo_xml)
    except ValueError as err:
        raise EnvironmentProblem(f"{node}: {lstopo}: {err}") from None
    if not any(topo.numa.values()):
        raise EnvironmentProblem(f"{node}: {lstopo}: no NUMA node with cores; allowed: the "
                                 "topology of the whole node (hwloc 2)")
    every = [p for core in topo.cores() for p in core]  # a core two NUMA nodes hold once
    if len(every) != shape.cpus:
        warnings.append(f"{node}: Slurm has {shape.cpus} CPUs, hwloc sees {len(every)}")
    if topo.unplaced:
        warnings.append(f"{node}: hwloc puts CPUs {cpu_list([p for c in topo.unplaced for p in c])}"
                        " in no NUMA node's cpuset; no slot binds them")
    highest = max(every)
    if highest >= shape.cpus:
        raise JobFailed(f"{node}: hwloc numbers its CPUs up to {highest}, Slurm's CPUTot is "
                        f"{shape.cpus}: a profile's CPU lists name CPUs 0-{shape.cpus - 1} only")
    source = f"{node}: {shape.describe()}"
    if not shape.gpus:  # CPU nodes: one slot per NUMA node, its whole cores
        made = [Slot(None, n, cpu_list([p for c in cores for p in c]))
                for n, cores in sorted(topo.numa.items()) if cores]
        return TopologyFacts(name, tuple(made), ("",) * len(made), source)
    order = _gpu_order(node, shape, report, topo, warnings)
    made, more = gpu_slots(topo, order)
    warnings += [f"{node}: {line}" for line in more]
    made = _active_ports(node, report, made, warnings)
    _cross_check(node, report, made, warnings)
    return TopologyFacts(name, tuple(made), tuple(order), source)


def _active_ports(node: str, report: node_report.NodeReport, made: list[Slot],
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


def _node_folder(conf: dict[str, str], key: str) -> str | None:
    """``scontrol show config``'s TmpFS or SlurmdSpoolDir (None where it names none)."""
    value = conf.get(key)
    try:
        return None if value is None else check_node_folder(value, f"scontrol show config: {key}")
    except UserError as err:  # the rule is the profile's; the value came from Slurm
        raise EnvironmentProblem(str(err)) from None


def _enroot_warnings(reports: dict[str, node_report.NodeReport], warnings: list[str]) -> None:
    """pyxis found: each probed node's enroot, where it cannot run or lacks the PMI hook in
    the hooks.d folders enroot itself reads (``enroot info``)."""
    hook = node_report.PMI_HOOK
    for host, r in reports.items():
        if r.enroot.command is None:
            warnings.append(f"{host}: pyxis without enroot: "
                            f"{'; '.join(r.enroot.problems) or 'not found'}")
        elif r.enroot.problems:
            warnings.append(enroot_probe.cannot_run(host, r.enroot))
        elif not r.enroot.enabled(hook):
            where = " or ".join(message_value(f) for f in r.enroot.hook_folders) or "hooks.d"
            warnings.append(f"{host}: pyxis without enroot's {hook} hook in {where} (enroot "
                            "info): multi-node srun --mpi=pmix fails in containers (copy it "
                            "from enroot's hooks.d examples, executable)")


def survey(slurm: Slurm, wanted: list[str], name: str | None = None
           ) -> tuple[Facts, list[str], list[str]]:
    """(facts, warnings, the Slurm steps run) for the partitions ``wanted``."""
    conf = config(slurm.output(["scontrol", "show", "config"]))
    controller = controller_address(conf)
    version = slurm_version(conf)
    cluster = conf.get("ClusterName", "cluster")
    if name is None and not NAME.match(cluster):
        raise EnvironmentProblem(f"scontrol show config: ClusterName={message_value(cluster)}; "
                                 "allowed: letters, digits, '.', '_', '-' (or give --name)")
    parts = slurm.listing("partition")
    if not parts:
        raise EnvironmentProblem("scontrol show partition -o: no PartitionName= record in its "
                                 "answer; run it where Slurm's scontrol reaches the cluster")
    for p in wanted:
        if p not in parts:
            raise UserError(f"--partition: {p!r} is not a partition of this cluster; allowed: "
                            + ", ".join(message_value(k) for k in sorted(parts)))
    nodes = slurm.listing("node")
    if not nodes:
        raise EnvironmentProblem("scontrol show node -o: no NodeName= record in its answer; run "
                                 "it where Slurm's scontrol reaches the cluster")
    plugins = slurm.mpi_plugins()
    pyxis = PYXIS.srun_option in slurm.run(["srun", "--help"], timeout=ANSWER_S).stdout
    warnings: list[str] = []
    steps: list[str] = []
    shapes: dict[Shape, TopologyFacts] = {}
    reports: dict[str, node_report.NodeReport] = {}  # by Slurm's node name
    partitions = []
    for p in wanted:
        record = parts[p]
        try:
            names = slurm.hostnames(record.get("Nodes", ""))
        except EnvironmentProblem as err:
            raise EnvironmentProblem(f"partition {p}: {err}") from None
        if not names:
            raise JobFailed(f"partition {p}: it has no nodes")
        by_shape: dict[Shape, list[str]] = {}
        for node in names:
            by_shape.setdefault(_shape(node, nodes.get(node)), []).append(node)
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
        try:
            parse_time(max_time, f"partition {p}: MaxTime")
        except UserError as err:  # the rule is the profile's; the value came from Slurm
            raise EnvironmentProblem(str(err)) from None
        partitions.append(PartitionFacts(
            p, record.get("Default", "NO") == "YES", len(names), max_time, shape.cpus,
            shape.memory_mb, gres_gpu_type(shape.gres), shapes[shape].name,
            record.get("Nodes", "")))
    if pyxis:
        _enroot_warnings(reports, warnings)
    srun_mpi = "pmix" if any(x.startswith("pmix") for x in plugins) else \
        "pmi2" if "pmi2" in plugins else None
    if srun_mpi is None:
        warnings.append("srun offers neither pmix nor pmi2: launcher mpirun")
    ifnames = {r.socket_ifname for r in reports.values()}
    facts = Facts(
        name=name or cluster, srun_mpi=srun_mpi, plugins=plugins,
        socket_ifname=ifnames.pop() if len(ifnames) == 1 else None,
        runtimes=tuple(sorted({x for r in reports.values() for x in r.runtimes})), pyxis=pyxis,
        partitions=tuple(partitions), topologies=tuple(shapes.values()),
        slurm_version=version, tmpfs=_node_folder(conf, "TmpFS"),
        spool_dir=_node_folder(conf, "SlurmdSpoolDir"))
    if version is None:
        warnings.append("scontrol show config names no SLURM_VERSION: slurm_version not "
                        "written (the bundle then assumes today's Slurm)")
    return facts, warnings, steps

