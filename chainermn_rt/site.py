"""Site profiles: the declarative facts of one cluster, parsed and validated in one place.

A profile is a TOML file (see slurm/sites/*.toml and docs/site-profiles.md)::

    name = "sandbox"
    launcher = "srun"          # srun | mpirun
    srun_mpi = "pmix"          # pmix | pmi2

    [[partitions]]
    name = "gpu"
    nodes = 2
    max_time = "01:00:00"
    cpus_per_node = 4
    topology = "fake4"

    [topology.fake4]
    [[topology.fake4.slots]]   # one slot per rank a node runs: per GPU, in GPU order
    gpu = 0
    numa = 0
    cpus = "0"
    hcas = ["mlx5_0:1"]

>>> site = load_site("slurm/sites/sandbox.toml")   # doctest: +SKIP
>>> site.partition(None).name                     # doctest: +SKIP
'gpu'

Every mistake raises :class:`UserError` naming the file, the field and what is allowed.
"""

from __future__ import annotations

import ipaddress
import json
import posixpath
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chainermn_rt.errors import UserError, message_value
from chainermn_rt.files import read_small
from chainermn_rt.interconnect import Fabric, MpiModel, NcclNet, parse_fabric, parse_mpi, parse_nccl
from chainermn_rt.rank_contract import (
    CPU_LIST_ALLOWED,
    HCA,
    HCA_ALLOWED,
    Slot,
    check_settings,
    parse_cpu_list,
)
from chainermn_rt.runtimes import NAMES, RUNTIMES, Container
from chainermn_rt.sbatch_options import PLAN_OPTIONS, claimed_by
from chainermn_rt.slurm_records import MAX_CPUS_PER_NODE, MAX_GPUS_PER_NODE
from chainermn_rt.slurm_rules import (
    NODE_FOLDER_ALLOWED,
    VERSION_ALLOWED,
    check_node_folder,
    check_printable,
    check_variable,
    parse_memory_mb,
    parse_slurm_version,
    parse_time,
)

# the profile `render`, `submit`, `doctor` and `scaling` use without --site (set by the module
# of an install, docs/install.md)
SITE_VAR = "CHAINERMN_RT_SITE"
RANK_LAUNCHERS = ("srun", "mpirun")  # what a job script starts its ranks with
SRUN_MPI = ("pmix", "pmi2", "cray_shasta")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
MAX_NODES = 1_000_000  # in a partition; a profile's larger count is a mistake
MAX_PROFILE_BYTES = 1 << 20  # the shipped profiles are 2 KB at most
SANDBOX_MAX_NODES = 32  # the paper's 16 nodes and twice that (docs/sandbox.md)
# whose Slurm, MPI and Apptainer a sandbox runs (chainermn_rt/sandbox/stacks.py)
SANDBOX_STACKS = ("debian12", "debian13")
# Signals the batch shell may trap for the time limit or preemption (--signal=B:SIG@SECONDS).
BATCH_SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "ALRM", "URG", "XCPU")
SBATCH_OPTION = re.compile(r"[a-z][a-z0-9-]*[a-z0-9]\Z")
_GPUS = "--gpus-per-node (GPUs come from the topology's slots)"


@dataclass(frozen=True)
class Topology:
    name: str
    slots: tuple[Slot, ...]

    @property
    def gpus(self) -> int:
        return sum(1 for s in self.slots if s.gpu is not None)


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: int
    max_time: str
    max_time_s: int
    cpus_per_node: int
    topology: Topology
    memory_mb: int | None = None
    gpu_type: str | None = None
    default: bool = False
    sbatch: tuple[tuple[str, str | None], ...] = ()  # extra options; None: a flag
    # a node-local folder on every node (its own, not shared): where --stage copies data
    local_scratch: str | None = None


@dataclass(frozen=True)
class SandboxTable:
    """A profile's ``[sandbox]`` table: it describes the local Slurm sandbox (docs/sandbox.md)."""

    subnet: ipaddress.IPv4Network
    nodes: int | None = None
    # hwloc XML every node's tasks see as their hardware (HWLOC_XMLFILE): a GPU node, faked
    hwloc_xml: Path | None = None
    # MariaDB + slurmdbd: sacct, accounts and QOS enforced, QOS preemption (accounting.py)
    accounting: bool = True
    # the stack `sandbox up` starts for this profile and its jobs need; None: either
    stack: str | None = None


@dataclass(frozen=True)
class Site:
    name: str
    path: Path
    description: str
    launcher: str
    srun_mpi: str
    partitions: tuple[Partition, ...]
    container: Container
    environment: dict[str, str]
    modules: tuple[str, ...]
    account: str | None
    qos: str | None
    python: str | None
    signal: str | None  # "USR2@90": the batch shell's signal and its lead before the time limit
    requeue: bool
    socket_ifname: str | None
    sbatch: tuple[tuple[str, str | None], ...] = ()  # extra options; None: a flag
    sandbox: SandboxTable | None = None
    # [checks] allreduce_busbw_gbps: the bus bandwidth `chainermn-rt doctor` expects (GB/s)
    allreduce_busbw_gbps: float | None = None
    max_requeues: int = 3  # requeues of one job after a snapshot on the signal (with requeue)
    # seconds a preempted job runs on after the site's preemption signal (its QOS GraceTime)
    grace_time: int | None = None
    # node_exporter's textfile-collector folder: rank 0 writes the job's metrics there
    # (chainermn_rt.timeline; docs/timeline.md)
    metrics_textfile_dir: str | None = None
    # how the ranks reach the network (interconnect.py): which MPI (the image's own, or the
    # host's bound in), the fabric the job must get, NCCL's net plugin
    mpi: MpiModel = MpiModel()
    fabric: Fabric = Fabric()
    nccl: NcclNet = NcclNet()

    @property
    def host_libraries(self) -> tuple[str, ...]:
        """The host folders the ranks' container shows, first on their library path."""
        return tuple(dict.fromkeys((*self.mpi.paths, *self.fabric.paths, *self.nccl.paths)))

    @property
    def network_environment(self) -> tuple[tuple[str, str], ...]:
        return (*self.mpi.environment(), *self.fabric.environment(), *self.nccl.environment())
    # the cluster's Slurm, "24.11" (site init reads it); None: today's (slurm_rules.CHANGES)
    slurm_version: str | None = None
    # slurm.conf's TmpFS and SlurmdSpoolDir (site init reads them); None: Slurm's defaults.
    # A container sees the folders Slurm's PMIx plugin makes there (slurm_rules.step_folders)
    slurm_tmpfs: str | None = None
    slurmd_spool_dir: str | None = None

    @property
    def slurm_release(self) -> tuple[int, int] | None:
        return None if self.slurm_version is None else \
            parse_slurm_version(self.slurm_version, "slurm_version")

    def partition(self, name: str | None) -> Partition:
        """The named partition, or the default one (the one marked default, else the first)."""
        if name is None:
            return next((p for p in self.partitions if p.default), self.partitions[0])
        for p in self.partitions:
            if p.name == name:
                return p
        raise UserError(f"partition: {name!r} is not in site {self.name!r}; allowed: "
                        + ", ".join(p.name for p in self.partitions))


class _Table:
    """Reads one TOML table, remembering which keys were used so that typos are reported."""

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise UserError(f"{where}: not a table; allowed: a table")
        self.data, self.where, self.used = data, where, set()

    def get(self, key: str, kind: type | tuple, default: Any = ..., allowed: str = "") -> Any:
        self.used.add(key)
        if key not in self.data:
            if default is ...:
                raise UserError(f"{self.at(key)}: missing; allowed: {allowed or _kind(kind)}")
            return default
        value = self.data[key]
        ok = isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, (int,)))
        if not ok:
            raise UserError(f"{self.at(key)}: {value!r} has the wrong type; allowed: "
                            f"{allowed or _kind(kind)}")
        if isinstance(value, str) and "\0" in value:  # no argv or shell word can carry it
            raise UserError(f"{self.at(key)}: contains a NUL byte; allowed: any other text")
        return value

    def text(self, key: str, default: Any = ..., allowed: str = "") -> Any:
        """A string for a #SBATCH line or the script's header: no control characters."""
        value = self.get(key, str, default, allowed)
        return value if value is None else check_printable(value, self.at(key))

    def choice(self, key: str, choices: tuple[str, ...], default: Any = ...) -> str:
        value = self.get(key, str, default, allowed=" | ".join(choices))
        if value not in choices and not (value is None and default is None):
            raise UserError(f"{self.at(key)}: {value!r} is not allowed; allowed: "
                            + " | ".join(choices))
        return value

    def positive(self, key: str, default: Any = ..., high: int | None = None) -> int:
        allowed = "an integer >= 1" if high is None else f"an integer 1-{high}"
        value = self.get(key, int, default, allowed=allowed)
        if value is not None and not 1 <= value <= (high or value):
            raise UserError(f"{self.at(key)}: {value} is not allowed; allowed: {allowed}")
        return value

    def nonempty(self, key: str, default: Any = ..., allowed: str = "") -> Any:
        """A string that is not empty nor only blanks (NUL refused, as by :meth:`get`)."""
        value = self.get(key, str, default, allowed)
        if value is not None and not value.strip():
            raise UserError(f"{self.at(key)}: {value!r} is empty; allowed: {allowed}")
        return value

    def strings(self, key: str, pattern: re.Pattern | None = None, what: str = "") -> tuple:
        values = self.get(key, list, [], allowed="a list of strings")
        for i, v in enumerate(values):
            if not isinstance(v, str) or "\0" in v or (pattern and not pattern.match(v)):
                raise UserError(f"{self.at(key)}[{i}]: {v!r} is not allowed; allowed: "
                                f"{what or 'a string'}")
        return tuple(values)

    def at(self, key: str) -> str:
        key = key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)  # TOML quoting
        return f"{self.where}.{key}" if self.where else key

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise UserError(f"{self.at(unknown[0])}: unknown field; allowed: "
                            + ", ".join(sorted(self.used)))


def _kind(kind: type | tuple) -> str:
    names = {str: "a string", int: "an integer", bool: "true or false", list: "a list",
             dict: "a table"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _slot(t: _Table) -> Slot:
    gpu, numa = t.get("gpu", int, None), t.get("numa", int, 0)
    for key, value, high in (("gpu", gpu, MAX_GPUS_PER_NODE),
                             ("numa", numa, MAX_CPUS_PER_NODE)):
        if value is not None and not 0 <= value < high:
            raise UserError(f"{t.at(key)}: {value} is not allowed; allowed: an integer "
                            f"0-{high - 1}")
    cpus = t.get("cpus", str, allowed=CPU_LIST_ALLOWED)
    try:
        parse_cpu_list(cpus)
    except ValueError:
        raise UserError(f"{t.at('cpus')}: {message_value(cpus, quote=True)} is not allowed; "
                        f"allowed: {CPU_LIST_ALLOWED}") from None
    hcas = t.strings("hcas", HCA, HCA_ALLOWED)
    t.done()
    return Slot(gpu=gpu, numa=numa, cpus=cpus, hcas=hcas)


def _topology(name: str, data: Any, where: str) -> Topology:
    t = _Table(data, where)
    raw = t.get("slots", list, allowed="a list of [[slots]] tables")
    t.done()
    if not raw:
        raise UserError(f"{where}.slots: empty; allowed: one [[slots]] table per rank of a node")
    slots = tuple(_slot(_Table(s, f"{where}.slots[{i}]")) for i, s in enumerate(raw))
    gpus = [s.gpu for s in slots if s.gpu is not None]
    if gpus and len(gpus) != len(slots):
        raise UserError(f"{where}.slots: some slots have a gpu and some do not; allowed: every "
                        "slot with a gpu (GPU nodes) or none (CPU nodes)")
    if gpus and sorted(gpus) != list(range(len(gpus))):
        raise UserError(f"{where}.slots: gpu indices {gpus}; allowed: each of 0..{len(gpus) - 1} "
                        "once")
    return Topology(name=name, slots=slots)


LOCAL_SCRATCH_ALLOWED = ("an absolute path other than / of a folder each node has for itself, "
                         "e.g. \"/local/scratch\", without spaces, ':', ',' or '$'")


METRICS_DIR_ALLOWED = ("an absolute path of node_exporter's textfile-collector folder on the "
                       "compute nodes, e.g. \"/var/lib/node_exporter/textfile\", without '$', "
                       "':' or ',' (a container binds it: runtimes split binds on them)")


def _metrics_dir(t: _Table) -> str | None:
    value = t.text("metrics_textfile_dir", None, allowed=METRICS_DIR_ALLOWED)
    if value is not None and (not value.startswith("/") or any(c in value for c in "$:,")):
        raise UserError(f"{t.at('metrics_textfile_dir')}: {value!r} is not allowed; allowed: "
                        f"{METRICS_DIR_ALLOWED}")
    return value


def _node_folder(t: _Table, key: str) -> str | None:
    value = t.text(key, None, allowed=NODE_FOLDER_ALLOWED)
    return None if value is None else check_node_folder(value, t.at(key))


def _local_scratch(t: _Table, default: str | None) -> str | None:
    """``local_scratch``: a node-local folder the job script copies ``--stage`` data into."""
    if "local_scratch" not in t.data:
        t.used.add("local_scratch")
        return default
    value = t.text("local_scratch", allowed=LOCAL_SCRATCH_ALLOWED)
    if not value.startswith("/") or value.rstrip("/") == "" or "$" in value or \
            re.search(r"[\s:,]", value):
        raise UserError(f"{t.at('local_scratch')}: {value!r} is not allowed; allowed: "
                        f"{LOCAL_SCRATCH_ALLOWED}")
    return posixpath.normpath(value).replace("//", "/")


def _partition(t: _Table, topologies: dict[str, Topology],
               local_scratch: str | None = None) -> Partition:
    name = t.text("name", allowed="a partition name")
    topo = t.get("topology", str, allowed=" | ".join(topologies) or "a [topology.NAME] table")
    if topo not in topologies:
        raise UserError(f"{t.at('topology')}: {topo!r} is not defined; allowed: "
                        + (" | ".join(topologies) or "add a [topology.NAME] table"))
    max_time = t.get("max_time", str, allowed="a Slurm time such as \"2-00:00:00\"")
    memory = t.get("memory", str, None, allowed="a memory size such as \"512G\"")
    partition = Partition(
        name=name, nodes=t.positive("nodes", high=MAX_NODES), max_time=max_time,
        max_time_s=parse_time(max_time, t.at("max_time")),
        cpus_per_node=t.positive("cpus_per_node", high=MAX_CPUS_PER_NODE),
        topology=topologies[topo],
        memory_mb=None if memory is None else parse_memory_mb(memory, t.at("memory")),
        gpu_type=t.text("gpu_type", None), default=t.get("default", bool, False),
        sbatch=_sbatch(t.get("sbatch", dict, {}), t.at("sbatch")),
        local_scratch=_local_scratch(t, local_scratch))
    t.done()
    if partition.cpus_per_node < len(partition.topology.slots):
        raise UserError(f"{t.at('cpus_per_node')}: {partition.cpus_per_node} is fewer than the "
                        f"{len(partition.topology.slots)} slots of topology {topo!r}; allowed: "
                        f">= {len(partition.topology.slots)}")
    for i, slot in enumerate(partition.topology.slots):
        highest = max(slot.cpu_ids)
        if highest >= partition.cpus_per_node:
            raise UserError(f"topology.{topo}.slots[{i}].cpus: {slot.cpus!r} names CPU {highest}"
                            f", past partition {name!r}'s cpus_per_node = "
                            f"{partition.cpus_per_node}; allowed: CPUs "
                            f"0-{partition.cpus_per_node - 1}")
    return partition


def _sbatch(data: Any, where: str) -> tuple[tuple[str, str | None], ...]:
    """An ``[sbatch]`` table: #SBATCH options the Plan does not model, in the profile's order."""
    t = _Table(data, where)
    allowed = "a non-empty string (quote numbers), or true for an option without a value"
    options = []
    for key in data:
        if not SBATCH_OPTION.match(key):
            raise UserError(f"{t.at(key)}: not an sbatch option name; allowed: its long name "
                            "without --, in lower-case letters, digits and '-', e.g. constraint")
        claimed = claimed_by(key)
        if claimed is not None:
            what = "sets this option" if claimed == key else \
                f"sets --{claimed}, which sbatch takes this for"
            raise UserError(f"{t.at(key)}: chainermn-rt {what}; allowed: "
                            f"{PLAN_OPTIONS[claimed]}")
        value = t.get(key, (str, bool), allowed=allowed)
        if value is False or value == "":
            raise UserError(f"{t.at(key)}: {value!r} is not allowed; allowed: {allowed}")
        if value is not True:
            check_printable(value, t.at(key))
        if key == "gres" and "gpu" in (g.split(":")[0] for g in str(value).split(",")):
            raise UserError(f"{t.at(key)}: {value!r} requests GPUs; allowed: other GRES only "
                            f"(GPUs: {_GPUS})")
        options.append((key, None if value is True else value))
    return tuple(options)


def _container(data: Any, sandbox: bool) -> Container:
    """``sandbox``: the profile describes the local sandbox, whose nodes see this machine's
    files: a relative image of a file-based runtime is the checkout's (``make sif`` writes
    build/images/ there), as the sandbox's state folder is (:func:`checkout`)."""
    t = _Table(data, "container")
    runtime = t.choice("runtime", NAMES, "none")
    image = t.text("image", None)
    base = checkout() if sandbox and RUNTIMES[runtime].file_image else None
    if image and base is not None and not posixpath.isabs(image) and ":" not in image:
        image = str(base / image)
    c = Container(
        runtime=runtime,
        image=image,
        binds=t.strings("binds", re.compile(r"[^:,\s]+(:[^:,\s]+){0,2}\Z"),
                        "SRC[:DST[:OPTIONS]] without spaces or commas"),
        flags=t.strings("flags"),
        python=t.nonempty("python", "python3", allowed="the interpreter's path or name in the "
                          "image"))
    t.done()
    return c


def _environment(data: Any, slurm: tuple[int, int] | None) -> dict[str, str]:
    t = _Table(data, "environment")
    env = {}
    for key in data:
        if not ENV_NAME.match(key):
            raise UserError(f"{t.at(key)}: not a variable name; allowed: letters, digits "
                            "and _, not starting with a digit")
        check_variable(key, t.at(key), slurm)
        env[key] = t.get(key, str, allowed="a string (quote numbers)")
    check_settings(env, "environment.")
    return env


def sandbox_max_nodes(subnet: ipaddress.IPv4Network) -> int:
    """The most nodes a sandbox on ``subnet`` may have: SANDBOX_MAX_NODES, fewer where the
    subnet's addresses run out (the head takes the first, a /28 holds 13 nodes)."""
    return min(SANDBOX_MAX_NODES, subnet.num_addresses - 3)


def _sandbox(data: Any, path: Path) -> SandboxTable | None:
    if data is None:
        return None
    t = _Table(data, "sandbox")
    allowed = "a private IPv4 network from /16 to /28, e.g. \"10.213.0.0/24\""
    text = t.get("subnet", str, "10.213.0.0/24", allowed=allowed)
    try:
        subnet = ipaddress.IPv4Network(text, strict=True)
    except ValueError:
        subnet = None
    if subnet is None or not subnet.is_private or subnet.is_loopback or \
            not 16 <= subnet.prefixlen <= 28:
        raise UserError(f"{t.at('subnet')}: {text!r} is not allowed; allowed: {allowed}")
    most = sandbox_max_nodes(subnet)
    nodes = t.get("nodes", int, None, allowed=f"1-{most}")
    if nodes is not None and not 1 <= nodes <= most:
        raise UserError(f"{t.at('nodes')}: {nodes} is not allowed; allowed: 1-{most}")
    xml = t.text("hwloc_xml", None, allowed="a path to an hwloc XML file")
    if xml is not None:
        xml = (Path(path).parent / xml).absolute()  # relative to the profile
        try:
            found = xml.is_file()
        except OSError:  # a name too long for the file system
            found = False
        if not found:
            raise UserError(f"{t.at('hwloc_xml')}: {message_value(str(xml), 512)} is not a "
                            "file; allowed: an hwloc XML "
                            "file (lstopo --of xml), relative to the profile's folder")
    accounting = t.get("accounting", bool, True)
    stack = t.choice("stack", SANDBOX_STACKS, None)
    t.done()
    return SandboxTable(subnet=subnet, nodes=nodes, hwloc_xml=xml, accounting=accounting,
                        stack=stack)


def _checks(data: Any) -> float | None:
    """The ``[checks]`` table: what ``chainermn-rt doctor`` expects of the cluster."""
    if data is None:
        return None
    t = _Table(data, "checks")
    allowed = "a number > 0 (GB/s, nccl-tests' busbw)"
    busbw = t.get("allreduce_busbw_gbps", (int, float), None, allowed=allowed)
    if busbw is not None and (isinstance(busbw, bool) or not 0 < busbw < float("inf")):
        raise UserError(f"{t.at('allreduce_busbw_gbps')}: {busbw} is not allowed; allowed: "
                        f"{allowed}")
    t.done()
    return None if busbw is None else float(busbw)


SIGNAL_ALLOWED = ("[B:]SIG@SECONDS with SIG one of " + ", ".join(BATCH_SIGNALS)
                  + " and SECONDS 10-65535, e.g. \"USR2@90\"")


def _signal(text: str | None) -> str | None:
    """``[B:]SIG@SECONDS`` -> ``SIG@SECONDS``: the batch shell traps it, so it always goes to the
    shell alone (``B:``); a signal the ranks got would kill them."""
    if text is None:
        return None
    m = re.match(r"(?:B:)?([A-Z0-9]+)@(\d+)\Z", text) if isinstance(text, str) else None
    if not m or m.group(1) not in BATCH_SIGNALS or not 10 <= int(m.group(2)) <= 65535:
        raise UserError(f"signal: {text!r} is not allowed; allowed: {SIGNAL_ALLOWED}")
    return f"{m.group(1)}@{int(m.group(2))}"


def _grace_time(value: int | None, signal: str | None) -> int | None:
    """A preempted job's grace time must cover the signal's lead: the batch shell's wait for a
    snapshot (decided from the lead) then ends before Slurm kills the job."""
    if value is None:
        return None
    allowed = "whole seconds 1-65535, at least the signal's lead"
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise UserError(f"grace_time: {value!r} is not allowed; allowed: {allowed}")
    lead = int(signal.partition("@")[2]) if signal else 0
    if value < lead:
        raise UserError(f"grace_time: {value} s is shorter than the lead of signal = "
                        f"\"{signal}\"; allowed: at least {lead} s (the signal must come before "
                        "the grace time ends), or a signal with a shorter lead")
    return value


def parse_site(data: dict[str, Any], path: Path) -> Site:
    """Validate the parsed TOML of a profile; :class:`UserError` names the first bad field."""
    t = _Table(data, "")
    name = t.get("name", str, allowed="a site name")
    if not NAME.match(name):
        raise UserError(f"name: {name!r} is not allowed; allowed: letters, digits, '.', '_', '-'")
    topo_table = _Table(t.get("topology", dict, allowed="[topology.NAME] tables"), "topology")
    for k in topo_table.data:
        if not NAME.match(k):
            raise UserError(f"{topo_table.at(k)}: not a topology name; allowed: letters, digits, "
                            "'.', '_', '-'")
    topologies = {k: _topology(k, topo_table.get(k, dict), f"topology.{k}")
                  for k in topo_table.data}
    raw_parts = t.get("partitions", list, allowed="a list of [[partitions]] tables")
    if not raw_parts:
        raise UserError("partitions: empty; allowed: at least one [[partitions]] table")
    scratch = _local_scratch(t, None)  # the default of every partition
    parts = tuple(_partition(_Table(p, f"partitions[{i}]"), topologies, scratch)
                  for i, p in enumerate(raw_parts))
    names = [p.name for p in parts]
    if len(set(names)) != len(names):
        raise UserError(f"partitions: duplicate names {names}; allowed: each name once")
    if sum(p.default for p in parts) > 1:
        raise UserError("partitions: more than one has default = true; allowed: at most one")
    signal = _signal(t.get("signal", str, None, allowed=SIGNAL_ALLOWED))
    slurm_version = t.get("slurm_version", str, None, allowed=VERSION_ALLOWED)
    slurm = None if slurm_version is None else \
        parse_slurm_version(slurm_version, t.at("slurm_version"))
    site = Site(
        name=name, path=path, description=t.get("description", str, ""),
        launcher=t.choice("launcher", RANK_LAUNCHERS),
        srun_mpi=t.choice("srun_mpi", SRUN_MPI, "pmix"),
        partitions=parts,
        container=_container(t.get("container", dict, {}), "sandbox" in data),
        environment=_environment(t.get("environment", dict, {}), slurm),
        modules=t.strings("modules"),
        account=t.text("account", None), qos=t.text("qos", None),
        python=t.nonempty("python", None, allowed="the interpreter's path or name on the "
                          "compute nodes"),
        signal=signal, requeue=t.get("requeue", bool, False),
        max_requeues=t.get("max_requeues", int, 3, allowed="0-1000"),
        grace_time=_grace_time(t.get("grace_time", int, None, allowed="whole seconds 1-65535"),
                               signal),
        socket_ifname=t.nonempty("socket_ifname", None, allowed="a network interface's name "
                                 "(or NCCL's list, e.g. \"^docker,lo\")"),
        sbatch=_sbatch(t.get("sbatch", dict, {}), "sbatch"),
        sandbox=_sandbox(t.get("sandbox", dict, None), path),
        allreduce_busbw_gbps=_checks(t.get("checks", dict, None)),
        metrics_textfile_dir=_metrics_dir(t), slurm_version=slurm_version,
        slurm_tmpfs=_node_folder(t, "slurm_tmpfs"),
        slurmd_spool_dir=_node_folder(t, "slurmd_spool_dir"),
        mpi=parse_mpi(t.get("mpi", dict, None, allowed="an [mpi] table")),
        fabric=parse_fabric(t.get("fabric", dict, None, allowed="a [fabric] table")),
        nccl=parse_nccl(t.get("nccl", dict, None, allowed="an [nccl] table")))
    if not 0 <= site.max_requeues <= 1000:
        raise UserError(f"max_requeues: {site.max_requeues!r}; allowed: 0-1000")
    t.done()
    return site


def load_site(path: str | Path, argument: str = "--site") -> Site:
    """Read and validate a profile file; errors are prefixed with the file's path, and a
    missing file names the ``argument`` that gave it."""
    path = Path(path)
    shipped = f"or a shipped one: {', '.join(shipped_sites())}"
    try:
        data = tomllib.loads(read_small(path, MAX_PROFILE_BYTES, follow_links=True)
                             .decode("utf-8"))
    except OSError as err:
        raise UserError(f"{argument}: {path}: {(err.strerror or 'unreadable').lower()}; "
                        f"allowed: a readable site profile (.toml) {shipped}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not valid TOML: {err}; allowed: a UTF-8 TOML file "
                        "(https://toml.io)") from None
    except RecursionError:
        raise UserError(f"{path}: not valid TOML: nested too deeply; allowed: a site profile "
                        "(docs/site-profiles.md)") from None
    except ValueError as err:  # read_small: a device, a FIFO, a folder, too large
        raise UserError(f"{argument}: {path}: {err}; allowed: a site profile (.toml), a file "
                        f"of at most {MAX_PROFILE_BYTES >> 20} MiB, {shipped}") from None
    try:
        return parse_site(data, path)
    except UserError as err:
        raise UserError(f"{path}: {err}") from None


def data_dir() -> Path:
    """slurm/ (templates, sites, sandbox files), in the checkout or inside the installed wheel."""
    from importlib.util import find_spec

    try:
        spec = find_spec("chainermn_rt.slurm")
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:  # a checkout that is not installed
        return Path(__file__).resolve().parent.parent / "slurm"
    return Path(list(spec.submodule_search_locations)[0])


def checkout() -> Path | None:
    """The source checkout the bundle runs from (the folder of pyproject.toml and build/),
    or None for an installed wheel."""
    folder = data_dir().parent
    return folder if (folder / "pyproject.toml").is_file() else None


def shipped_sites() -> list[str]:
    return sorted(p.stem for p in (data_dir() / "sites").glob("*.toml"))


def resolve_site(name_or_path: str) -> Path:
    """A path as given, or the name of a shipped profile (``sandbox``, ``dgx-h100``, ...)."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        return path
    return data_dir() / "sites" / f"{name_or_path}.toml"
