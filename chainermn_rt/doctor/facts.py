"""What one rank can tell about itself: where it runs, what it is bound to, which GPU and which
libraries it uses. Read from the launcher's variables, the slot table, sysfs, /proc and the
modules it imports; nothing here starts MPI (probe.py adds MPI's side, mpi_facts).

>>> numa_of_cpus([0, 1, 5], {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]})
[0, 1]
>>> policy_nodes("bind:0-1"), policy_nodes("default")
([0, 1], None)
"""

from __future__ import annotations

import ctypes
import importlib
import os
import platform
import socket
from collections.abc import Mapping
from pathlib import Path

from chainermn_rt.devices import VISIBLE_VAR, count_gpu_devices, physical_gpu, visible_gpus
from chainermn_rt.errors import UserError
from chainermn_rt.files import read_small
from chainermn_rt.job_env import JobEnvironment
from chainermn_rt.rank import binding
from chainermn_rt.rank_contract import SLOTS_VAR, load_slots, parse_cpu_list

# Libraries whose versions must agree on every rank (module name = the name shown).
LIBRARIES = ("chainer", "chainermn", "cupy", "numpy", "mpi4py")
# Variables reported as they are.
REPORTED_ENV = (VISIBLE_VAR, "UCX_NET_DEVICES", "NCCL_IB_HCA")
SYS = Path("/sys")
CUDA_FLAG = "mca:mpi:base:param:mpi_built_with_cuda_support:value"


def _read(path: Path) -> str | None:
    """A small file of the kernel's (/sys, /proc), bounded; None when unreadable."""
    try:
        return read_small(path, 1 << 16, follow_links=True).decode(errors="replace").strip()
    except (OSError, ValueError):
        return None


def numa_cpus(sys: Path = SYS) -> dict[int, list[int]]:
    """NUMA node -> its CPUs, from /sys/devices/system/node; {} where the kernel has none."""
    found = {}
    for node in sorted((sys / "devices/system/node").glob("node[0-9]*")):
        text = _read(node / "cpulist")
        if text:
            found[int(node.name[4:])] = parse_cpu_list(text)
    return found


def numa_of_cpus(cpus: list[int], nodes: Mapping[int, list[int]]) -> list[int]:
    """The NUMA nodes that ``cpus`` belong to, in order."""
    return sorted(n for n, members in nodes.items() if set(members) & set(cpus))


def allowed_cpus(sys: Path = SYS) -> list[int]:
    """CPUs this rank's node lets it use: its cgroup's cpuset, else every online CPU."""
    cgroup = _read(Path("/proc/self/cgroup")) or ""
    for line in cgroup.splitlines():
        hierarchy, _, path = line.partition(":")[2].partition(":")
        if hierarchy == "":  # cgroup v2
            text = _read(sys / "fs/cgroup" / path.lstrip("/") / "cpuset.cpus.effective")
        elif "cpuset" in hierarchy.split(","):
            text = _read(sys / "fs/cgroup/cpuset" / path.lstrip("/") / "cpuset.effective_cpus")
        else:
            continue
        if text:
            return parse_cpu_list(text)
    return parse_cpu_list(_read(sys / "devices/system/cpu/online") or "0")


def memory_policy() -> str:
    """This process's memory policy as /proc/self/numa_maps shows it: ``default``, ``bind:0``..."""
    try:  # only its first line: the whole file grows with the libraries mapped
        with open("/proc/self/numa_maps", "rb") as f:
            line = f.readline(4096).decode(errors="replace").split()
    except OSError:
        line = []
    return line[1] if len(line) > 1 else "default"


def policy_nodes(policy: str) -> list[int] | None:
    """The NUMA nodes a policy confines memory to; None when it does not (``default``, local)."""
    _, sep, nodes = policy.partition(":")
    try:
        return parse_cpu_list(nodes) if sep else None  # node lists are written like CPU lists
    except ValueError:
        return None


def library_versions() -> dict[str, str | None]:
    """Each library's ``__version__`` as imported here (None: not installed)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            found[name] = str(importlib.import_module(name).__version__)
        except ModuleNotFoundError:
            found[name] = None
        except Exception as err:  # noqa: BLE001 - a library that fails to import is a finding
            found[name] = f"error: {type(err).__name__}"
    try:
        from cupy.cuda import nccl

        found["nccl"] = str(nccl.get_version()) if nccl.available else None
    except Exception:  # noqa: BLE001 - no CuPy or no NCCL
        found["nccl"] = None
    return found


def gpu_facts(device: int | None, environ: Mapping[str, str]) -> dict | None:
    """The GPU this rank uses: its index in the process, the node's index (as the per-rank
    step finds it: :func:`physical_gpu`); where CuPy sees it (``cuda``), its UUID and NUMA node
    (sysfs)."""
    if device is None:
        return None
    found = {"device": device, "physical": physical_gpu(device, environ),
             "cuda": False, "uuid": None, "numa": None}
    try:
        import cupy

        runtime = cupy.cuda.runtime
        props = runtime.getDeviceProperties(device)
        found["cuda"] = True
    except Exception:  # noqa: BLE001 - no CuPy or no real GPU (the sandbox's are fake)
        return found
    h = bytes(props.get("uuid", b"")).hex()  # written as nvidia-smi -L writes it
    if len(h) == 32:
        found["uuid"] = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    numa = _read(SYS / "bus/pci/devices" / runtime.deviceGetPCIBusId(device).lower()
                 / "numa_node")
    found["numa"] = int(numa) if numa and int(numa) >= 0 else None
    return found


def rank_facts(environ: Mapping[str, str] | None = None) -> dict:
    """Everything this rank can say before MPI starts, as JSON-ready values."""
    env = os.environ if environ is None else environ
    job = JobEnvironment.detect(env)
    facts: dict = {
        "host": socket.gethostname(), "node": env.get("SLURMD_NODENAME") or job.hostname,
        "launcher": {"name": job.launcher, "rank": job.global_rank, "size": job.world_size,
                     "local_rank": job.local_rank, "local_size": job.local_size},
        "mpi": None, "errors": [],
        "env": {k: env.get(k) for k in REPORTED_ENV},
    }
    visible = visible_gpus(env)
    facts["visible_gpus"] = len(visible) if visible is not None else count_gpu_devices()
    device, slot = None, None
    try:
        slots = load_slots(env[SLOTS_VAR]) if env.get(SLOTS_VAR) else None
        b = binding(slots, env)  # the same decision the per-rank step made
        device, slot = b.device, b.slot
    except UserError as err:
        facts["errors"].append(str(err))
    facts["slot"] = slot.to_json() if slot else None
    facts["gpu"] = gpu_facts(device, env)
    cpus = sorted(os.sched_getaffinity(0))
    nodes = numa_cpus()
    policy = memory_policy()
    facts.update(cpus=cpus, allowed_cpus=allowed_cpus(), cpu_numa=numa_of_cpus(cpus, nodes),
                 numa_nodes=sorted(nodes), memory_policy=policy,
                 memory_numa=policy_nodes(policy), versions=library_versions())
    return facts


def cuda_aware() -> dict:
    """Whether MPI can take GPU buffers: Open MPI's ``MPIX_Query_cuda_support()`` (run time),
    else ompi_info's build flag; ``value`` None when neither answers. Call after MPI_Init."""
    query = getattr(ctypes.CDLL(None), "MPIX_Query_cuda_support", None)
    if query is not None:
        return {"value": bool(query()), "source": "MPIX_Query_cuda_support"}
    from chainermn_rt.doctor.stack import ompi_params

    _, params = ompi_params()
    value = params.get(CUDA_FLAG)
    return {"value": None if value is None else value == "true", "source": "ompi_info"}
