"""Cross-rank checks: pure functions over the rank reports of a doctor job (probe.py).

Each returns a :class:`~chainermn_rt.doctor.check.Check` (PASS, FAIL or n/a, reason, hint and
the nodes at fault: checks of the job as a whole, such as a launcher/MPI mismatch, name none).
docs/doctor.md explains each.

>>> r = {"node": "n1", "launcher": {"rank": 0}, "env": {"NCCL_IB_HCA": "=mlx5_0:1"}}
>>> nccl_ib_hca([r, dict(r, launcher={"rank": 1}, env={"NCCL_IB_HCA": "=mlx5_1:1"})]).reason
'n1: NCCL_IB_HCA is =mlx5_0:1 on rank 0, =mlx5_1:1 on rank 1'
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from chainermn_rt.doctor import network
from chainermn_rt.doctor.check import FAIL, NA, PASS, Check
from chainermn_rt.doctor.worlds import describe, size, worlds

# The bandwidth check fails below this share of the profile's allreduce_busbw_gbps.
BANDWIDTH_FACTOR = 0.5
VERSIONED = ("python", "chainer", "chainermn", "cupy", "numpy", "mpi4py", "nccl")


@dataclass(frozen=True)
class Expected:
    """What the job was asked for: ``ranks`` started; the profile's bandwidth, if any."""

    ranks: int
    busbw_gbps: float | None = None
    # the profile's network (interconnect.py): the library it binds, its fabric, NCCL's plugin
    mpi_library: str | None = None
    fabric: str | None = None
    provider: str | None = None
    nccl_plugin: str | None = None


Reports = list[dict]


def _rank(r: dict) -> int:
    return r["launcher"]["rank"]


def _ranks(reports: Reports) -> str:
    ranks = sorted(_rank(r) for r in reports)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _failed(name: str, bad: list[tuple[str, str]], hint: str, consequence: str = "") -> Check:
    """FAIL with the findings of (node, text) pairs (the first two, then how many more), the
    nodes blamed for them."""
    more = f" (and {len(bad) - 2} more)" if len(bad) > 2 else ""
    reason = "; ".join(text for _, text in bad[:2]) + more + consequence
    return Check(name, FAIL, reason, hint, tuple(dict.fromkeys(node for node, _ in bad)))


def _cpus(cpus: list[int]) -> str:
    return ",".join(map(str, sorted(cpus)))


def by_node(reports: Reports) -> dict[str, Reports]:
    """Node name -> its ranks' reports in rank order; nodes in the order of their first rank."""
    found: dict[str, Reports] = {}
    for r in sorted(reports, key=_rank):
        found.setdefault(r["node"], []).append(r)
    return found


def _nodes(reports: Reports) -> tuple[str, ...]:
    return tuple(by_node(reports))


def _with_mpi(reports: Reports) -> Reports:
    return [r for r in reports if r.get("mpi")]


def _gpu_ranks(reports: Reports) -> Reports:
    return [r for r in reports if r.get("gpu")]


def _gpu_id(r: dict) -> str:
    """A GPU's identity on its node: the UUID where CuPy saw one, else the node's index."""
    return r["gpu"]["uuid"] or r["gpu"]["physical"]


# -- ranks and MPI ---------------------------------------------------------------------------

def all_reported(reports: Reports, expected: Expected) -> Check:
    seen = {_rank(r) for r in reports}
    missing = sorted(set(range(expected.ranks)) - seen)
    if missing:
        return Check("reports", FAIL,
                     f"{len(missing)} of {expected.ranks} ranks wrote no report: "
                     f"{_ranks([{'launcher': {'rank': m}} for m in missing])}",
                     "read the job's log in the doctor folder: those ranks did not start or "
                     "died first")
    placed = [(r["node"], f"rank {_rank(r)} on {r['node']}: {r['errors'][0]}")
              for r in sorted(reports, key=_rank) if r.get("errors")]
    if placed:
        return _failed("reports", placed,
                       "the rank could not read its place (launcher variables, slot table, GPUs)")
    return Check("reports", PASS, f"{expected.ranks} of {expected.ranks} ranks reported from "
                                  f"{len(by_node(reports))} node(s): {', '.join(by_node(reports))}")


PMI_HINT = ("start ranks with a launcher that speaks the PMI of mpi4py's MPI: srun --mpi=pmix "
            "(srun_mpi in the profile) for Open MPI, or that MPI's own mpirun")


def launcher_mpi(reports: Reports) -> Check:
    """Every rank got through MPI_Init into one world (worlds.py), and the launcher's rank,
    size and local rank agree with MPI's on every rank."""
    name = "launcher-mpi"
    launched = max((r["launcher"]["size"] or 1) for r in reports)
    silent = [r for r in reports if not r.get("mpi")]
    found = worlds(_with_mpi(reports))
    one_world = max(launched, len(reports))  # where the launcher does not say its size
    if silent:
        # the others' worlds, unless they are one world of every rank (its rest stuck)
        whole = len(found) == 1 and size(found[0]) >= one_world
        others = f"; {describe(found, one_world)}" if found and not whole else ""
        return Check(name, FAIL, f"MPI_Init did not return on {_ranks(silent)} of {launched}: "
                                 "the launcher and MPI share no PMI, or MPI failed (the job's "
                                 f"log says which){others}", PMI_HINT)
    if len(found) > 1:
        alone = any(len(w) == 1 for w in found)
        return Check(name, FAIL, f"{describe(found, one_world)}: "
                                 + ("the launcher's PMI did not reach the MPI library" if alone
                                    else "MPI did not join them into one world"), PMI_HINT)
    wrong = []
    for r in reports:
        lau, mpi = r["launcher"], r["mpi"]
        # what the launcher does not say (None) is MPI's to say
        said = tuple(mpi[k] if lau[k] is None else lau[k] for k in ("rank", "size", "local_rank"))
        if said != (mpi["rank"], mpi["size"], mpi["local_rank"]):
            wrong.append(f"rank {lau['rank']} on {r['node']}: launcher {said[0]} of {said[1]} "
                         f"(local {said[2]}), MPI {mpi['rank']} of {mpi['size']} "
                         f"(local {mpi['local_rank']})")
    if wrong:
        return Check(name, FAIL, "; ".join(wrong[:3]) + (" ..." if len(wrong) > 3 else ""),
                     PMI_HINT + "; place ranks in blocks (consecutive ranks on one node)")
    return Check(name, PASS, f"launcher and MPI agree on rank, size and local rank of "
                             f"{len(reports)} ranks")


def processor_names(reports: Reports) -> Check:
    """ChainerMN groups ranks into nodes by MPI.Get_processor_name(): one name per node."""
    name = "processor-names"
    reports = _with_mpi(reports)
    if not reports:
        return Check(name, NA, "no rank got through MPI_Init")
    nodes_of: dict[str, set[str]] = {}
    for r in reports:
        nodes_of.setdefault(r["mpi"]["processor_name"], set()).add(r["node"])
    shared = {p: sorted(n) for p, n in nodes_of.items() if len(n) > 1}
    if shared:
        p, nodes = next(iter(shared.items()))
        return Check(name, FAIL, f"nodes {', '.join(nodes)} all report processor name {p!r}: "
                                 "ChainerMN counts them as one node (intra_rank, GPU choice)",
                     "give every node its own hostname (containers: do not set one fixed "
                     "--hostname)", tuple(sorted({n for ns in shared.values() for n in ns})))
    split = {node: sorted({r["mpi"]["processor_name"] for r in rs})
             for node, rs in by_node(reports).items()}
    split = {node: names for node, names in split.items() if len(names) > 1}
    if split:
        node, names = next(iter(split.items()))
        return Check(name, FAIL, f"{node}'s ranks report processor names {', '.join(names)}: "
                                 "ChainerMN sees each as a node of its own (intra_rank 0)",
                     "run the ranks of a node with the node's hostname (no per-rank "
                     "containers with their own hostnames)", tuple(split))
    return Check(name, PASS, f"{len(nodes_of)} processor name(s), one per node")


def _signature(r: dict, mpi: bool) -> tuple[tuple[str, str | None], ...]:
    sig = [(k, r["versions"].get(k)) for k in VERSIONED]
    if mpi:
        sig += [("MPI", r["mpi"]["library"]),
                ("CUDA-aware MPI", str(r["mpi"]["cuda_aware"]["value"]))]
    return tuple(sig)


def versions(reports: Reports) -> Check:
    """The same Python, chainer, chainermn, CuPy, NumPy, mpi4py, NCCL and MPI on every rank."""
    name = "versions"
    mpi = all(r.get("mpi") for r in reports)  # MPI's side only where every rank has one
    sigs = [(r, _signature(r, mpi)) for r in sorted(reports, key=_rank)]
    counts = Counter(s for _, s in sigs)
    if len(counts) == 1:
        sig = dict(sigs[0][1])
        shown = ", ".join(f"{k} {v}" for k, v in sig.items()
                          if v is not None and k not in ("MPI", "CUDA-aware MPI"))
        return Check(name, PASS, f"the same on every rank: {shown}"
                                 + (f"; {sig['MPI'].split(',')[0]}" if "MPI" in sig else ""))
    # the reference: the versions of most ranks; on a tie, those of the lowest rank
    reference = next(s for _, s in sigs if counts[s] == max(counts.values()))
    odd = [r for r, s in sigs if s != reference]
    diffs = []
    for i, (lib, _) in enumerate(reference):
        values: dict[str | None, Reports] = {}
        for r, s in sigs:
            values.setdefault(s[i][1], []).append(r)
        if len(values) > 1:
            diffs.append(f"{lib} " + ", ".join(
                f"{v or 'absent'} on {', '.join(_nodes(rs))} ({_ranks(rs)})"
                for v, rs in values.items()))
    return Check(name, FAIL, "; ".join(diffs),
                 "install one software stack for every node (one image or one environment on a "
                 "shared file system); look for PYTHONPATH, ~/.local and node-local installs",
                 _nodes(odd))


# -- GPUs ------------------------------------------------------------------------------------

def gpu_per_rank(reports: Reports) -> Check:
    """No two ranks of a node use one GPU."""
    name = "gpu-per-rank"
    gpu = _gpu_ranks(reports)
    if not gpu:
        return Check(name, NA, "no rank uses a GPU")
    bad = []
    for node, rs in by_node(gpu).items():
        users: dict[str, Reports] = {}
        for r in rs:
            users.setdefault(_gpu_id(r), []).append(r)
        bad += [(node, f"{node}: {_ranks(us)} all use GPU {g}")
                for g, us in users.items() if len(us) > 1]
    if bad:
        return _failed(name, bad,
                       "one rank per GPU: let `chainermn-rt rank` pick it (no --gpu-bind=map_gpu "
                       "or SLURM_GPU_BIND, no CUDA_VISIBLE_DEVICES of one GPU for every rank)")
    return Check(name, PASS, f"{len(gpu)} ranks, each on a GPU of its own")


def gpu_visibility(reports: Reports) -> Check:
    """Every rank sees at least the GPUs its node's ranks use (CUDA IPC between them)."""
    name = "gpu-visibility"
    gpu = _gpu_ranks(reports)
    if not gpu:
        return Check(name, NA, "no rank uses a GPU")
    bad = []
    for node, rs in by_node(gpu).items():
        used = len({_gpu_id(r) for r in rs})
        hidden = [r for r in rs if r["visible_gpus"] < used]
        if hidden:
            shown = hidden[0]["env"].get("CUDA_VISIBLE_DEVICES")
            bad.append((node, f"{node}: {_ranks(hidden)} see {hidden[0]['visible_gpus']} GPU(s) "
                              f"(CUDA_VISIBLE_DEVICES={shown}) of the {used} its ranks use"))
    if bad:
        return _failed(name, bad,
                       "no per-task GPU isolation (--gpus-per-task, --gpu-bind=single/map_gpu, a "
                       "container restricting devices): request --gpus-per-node",
                       ": CUDA IPC between ranks fails")
    return Check(name, PASS, "every rank sees all the GPUs of its node's ranks")


# -- binding ---------------------------------------------------------------------------------

def cpu_sharing(reports: Reports) -> Check:
    """Ranks of a node do not share CPUs while other CPUs they may use stay idle."""
    name = "cpu-sharing"
    bad = []
    for node, rs in by_node(reports).items():
        used = set().union(*(r["cpus"] for r in rs))
        idle = set().union(*(r["allowed_cpus"] for r in rs)) - used
        shared = [(a, b) for i, a in enumerate(rs) for b in rs[i + 1:]
                  if set(a["cpus"]) & set(b["cpus"])]
        if shared and idle:
            a, b = shared[0]
            bad.append((node, f"{node}: ranks {_rank(a)} and {_rank(b)} share CPU(s) "
                              f"{_cpus(set(a['cpus']) & set(b['cpus']))} while CPU(s) "
                              f"{_cpus(idle)} stay idle"))
    if bad:
        return _failed(name, bad,
                       "give each slot of the profile's topology CPUs of its own (cpus of "
                       "[topology.NAME] slots, near the slot's GPU); ranks on one GPU share its "
                       "slot too")
    return Check(name, PASS, "no ranks share CPUs while other CPUs of their node stay idle")


def _gpu_numa(r: dict) -> int | None:
    """The NUMA node of the rank's GPU: sysfs where a real GPU is seen, else the slot table."""
    if r["gpu"].get("numa") is not None:
        return r["gpu"]["numa"]
    return r["slot"]["numa"] if r.get("slot") else None


def numa(reports: Reports) -> Check:
    """A rank's CPUs and memory are on its GPU's NUMA node."""
    name = "numa"
    bad, seen = [], 0
    for r in _gpu_ranks(reports):
        g = _gpu_numa(r)
        if g is None or not r["cpu_numa"]:
            continue
        seen += 1
        where = f"rank {_rank(r)} on {r['node']}: GPU {r['gpu']['physical']} on NUMA node {g}"
        if set(r["cpu_numa"]) - {g}:
            bad.append((r["node"], f"{where}, its CPUs on {_cpus(r['cpu_numa'])}"))
        elif r["memory_numa"] is not None and set(r["memory_numa"]) - {g}:
            bad.append((r["node"], f"{where}, its memory on {_cpus(r['memory_numa'])} "
                                   f"({r['memory_policy']})"))
    if not seen:
        return Check(name, NA, "no rank with a GPU whose NUMA node is known")
    if bad:
        return _failed(name, bad,
                       "set each slot's numa and cpus to its GPU's NUMA node (nvidia-smi topo -m)")
    return Check(name, PASS, f"{seen} ranks: CPUs and memory on their GPU's NUMA node")


def rank_order(reports: Reports) -> Check:
    """Consecutive ranks of a node do not alternate between NUMA nodes (sockets)."""
    name = "rank-order"
    bad = []
    for node, rs in by_node(reports).items():
        seq = [r["cpu_numa"][0] for r in rs if len(r["cpu_numa"]) == 1]
        changes = sum(1 for a, b in zip(seq, seq[1:], strict=False) if a != b)
        if changes > len(set(seq)) - 1:
            bad.append((node, f"{node}: consecutive ranks {_rank(rs[0])}-{_rank(rs[-1])} sit on "
                              f"NUMA nodes {', '.join(map(str, seq))}"))
    if bad:
        return _failed(name, bad,
                       "place consecutive ranks on one socket: block distribution "
                       "(srun -m block:block), topology slots in GPU order with each GPU's CPUs")
    return Check(name, PASS, "no node's consecutive ranks alternate between NUMA nodes")


def nccl_ib_hca(reports: Reports) -> Check:
    """NCCL_IB_HCA is the same on every rank of a node (NCCL picks each GPU's NIC itself)."""
    name = "nccl-ib-hca"
    bad = []
    for node, rs in by_node(reports).items():
        values: dict[str | None, Reports] = {}
        for r in rs:
            values.setdefault(r["env"].get("NCCL_IB_HCA"), []).append(r)
        if len(values) > 1:
            bad.append((node, f"{node}: NCCL_IB_HCA is "
                              + ", ".join(f"{v} on {_ranks(g)}" for v, g in values.items())))
    if bad:
        return _failed(name, bad,
                       "set NCCL_IB_HCA to all of a node's HCAs on every rank; pin one NIC per "
                       "rank with UCX_NET_DEVICES (MPI) instead")
    return Check(name, PASS, "the same NCCL_IB_HCA on every rank of each node")


# -- collectives -----------------------------------------------------------------------------

def _not_run(name: str) -> Check:
    return Check(name, FAIL, "not run: MPI did not join the ranks into one world "
                             "(see launcher-mpi)", PMI_HINT)


def _allreduce(name: str, key: str, reports: Reports, gathered: bool, what: str) -> Check:
    if not gathered:
        return _not_run(name)
    wrong = [r for r in reports if not r[key]["ok"]]
    if wrong:
        w = wrong[0][key]
        first = w["first_wrong"]
        return Check(name, FAIL,
                     f"{_ranks(wrong)} on {', '.join(_nodes(wrong))}: {w['wrong']} of "
                     f"{w['elements']} elements wrong (element {first['index']}: "
                     f"{first['got']:g}, want {first['want']:g})",
                     "a transport corrupts data: try one transport at a time (OMPI_MCA_btl, "
                     "UCX_TLS, NCCL_P2P_DISABLE/NCCL_IB_DISABLE) and check those nodes",
                     _nodes(wrong))
    return Check(name, PASS, f"{what} over {len(reports)} ranks: every element right")


def allreduce_cpu(reports: Reports, gathered: bool) -> Check:
    return _allreduce("allreduce-cpu", "allreduce_cpu", reports, gathered,
                      "MPI Allreduce of CPU buffers")


def allreduce_gpu(reports: Reports, gathered: bool) -> Check:
    if not any(r.get("gpu") and r["gpu"].get("cuda") for r in reports):
        return Check("allreduce-gpu", NA, "no rank has a CUDA GPU (CuPy)")
    if gathered and not all("allreduce_gpu" in r for r in reports):
        return Check("allreduce-gpu", NA, "not every rank has a CUDA GPU (CuPy)")
    return _allreduce("allreduce-gpu", "allreduce_gpu", reports, gathered,
                      "ChainerMN pure_nccl mean of GPU buffers")


def bandwidth(reports: Reports, gathered: bool, expected: Expected) -> Check:
    name = "bandwidth"
    want = expected.busbw_gbps
    if want is None:
        return Check(name, NA, "the site profile gives no [checks] allreduce_busbw_gbps")
    if not gathered:
        return _not_run(name)
    found = [r["bandwidth"] for r in reports if "bandwidth" in r]
    if not found:
        return Check(name, FAIL, "no rank measured the bandwidth",
                     "rerun with --bandwidth-bytes above 0")
    m = min(found, key=lambda b: b["busbw_gbps"])
    what = f"busbw {m['busbw_gbps']:.3g} GB/s ({m['communicator']}, {m['nbytes']} bytes)"
    if any(b["wrong"] for b in found):
        return Check(name, FAIL, f"{what}, but its allreduce gave wrong results",
                     "see allreduce-cpu / allreduce-gpu")
    if m["busbw_gbps"] < BANDWIDTH_FACTOR * want:
        return Check(name, FAIL, f"{what} is below {BANDWIDTH_FACTOR:g} x the expected "
                                 f"{want:g} GB/s",
                     "check that InfiniBand, not TCP, carries it (NCCL_DEBUG=INFO once; "
                     "NCCL_IB_HCA, UCX_NET_DEVICES) and the GPU-NIC distance")
    return Check(name, PASS, f"{what}, at least {BANDWIDTH_FACTOR:g} x the expected {want:g} GB/s")


# -- all of them -----------------------------------------------------------------------------

PER_RANK: tuple[Callable[[Reports], Check], ...] = (
    launcher_mpi, processor_names, versions, gpu_per_rank, gpu_visibility, cpu_sharing, numa,
    rank_order, nccl_ib_hca)


def run_checks(reports: Reports, gathered: bool, expected: Expected) -> list[Check]:
    """Every check, in the order of the table."""
    if not reports:
        return [all_reported(reports, expected)]
    return ([all_reported(reports, expected)] + [check(reports) for check in PER_RANK]
            + [network.mpi_library(reports, expected.mpi_library),
               network.fabric(reports, expected.fabric, expected.provider),
               network.nccl_plugin(reports, expected.nccl_plugin)]
            + [allreduce_cpu(reports, gathered), allreduce_gpu(reports, gathered),
               bandwidth(reports, gathered, expected)])


def failed_nodes(checks: list[Check]) -> list[str]:
    """The nodes any check blames, each once, in a stable order."""
    return sorted({n for c in checks if c.status == FAIL for n in c.nodes}, key=_natural)


def _natural(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))
