"""What of a sandbox runs now, and what a sandbox that ended without ``down`` left behind."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

from chainermn_rt.sandbox import accounting, daemons, netns, processes
from chainermn_rt.sandbox.settings import SandboxSettings
from chainermn_rt.slurm_client import Slurm

BUSY_OR_IDLE = ("idle", "mixed", "allocated", "completing")


@dataclass
class Status:
    """``up`` is true only when every recorded daemon runs, every namespace exists and every
    node is idle or busy; ``lines`` say the same for people."""

    up: bool
    nodes: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(self.lines)


@dataclass
class Leftovers:
    """Namespaces named for this sandbox and processes marked as its daemons, with no record."""

    namespaces: list[str]
    procs: list[dict]

    def __bool__(self) -> bool:
        return bool(self.namespaces or self.procs)

    def __str__(self) -> str:
        parts = [f"namespaces {', '.join(self.namespaces)}"] if self.namespaces else []
        if self.procs:
            parts.append(f"processes {', '.join(str(p['pid']) for p in self.procs)}")
        return " and ".join(parts)


def leftovers(s: SandboxSettings) -> Leftovers:
    names = netns.existing(s.prefix)
    inodes = {processes.netns_inode(netns.path(n)) for n in names} - {None}
    marker = f"{daemons.MARKER_VAR}={s.state_dir}".encode()
    return Leftovers(names, processes.members(inodes, marker))


def status(s: SandboxSettings, record: dict | None, slurm: Slurm) -> Status:
    where = f"state folder {s.state_dir}"
    if record is None:
        left = leftovers(s)
        lines = [f"sandbox: down ({where})"]
        if left:
            lines.append(f"  left by a sandbox that ended without `down`: {left}; "
                         "`chainermn-rt sandbox down` removes them")
        return Status(up=False, lines=lines)
    lines, ok = [], True
    for name, proc in record["procs"].items():
        running = processes.alive(proc)
        ok &= running
        lines.append(f"  {name}: pid {proc['pid']} {'running' if running else 'NOT running'}")
    for ns in [s.netns(netns.HEAD), *(s.netns(n) for n in record["nodes"])]:
        present = netns.path(ns).exists()
        ok &= present
        lines.append(f"  namespace {ns}: {'present' if present else 'MISSING'}")
    nodes = daemons.node_states(slurm) if ok else {}
    for node in record["nodes"] if ok else []:
        state = nodes.get(node, "not registered")
        ok &= state.rstrip("*") in BUSY_OR_IDLE
        lines.append(f"  {node}: {state}")
    if s.accounting and ok:
        line = database(s, slurm)
        ok &= not line.endswith("NOT answering")
        lines.append(line)
    stack = record.get("stack", s.stack)
    lines.insert(0, f"  stack: {stack}" + (f" (the root {record['root']})"
                                           if record.get("root") else ""))
    head = f"sandbox: {'up' if ok else 'DEGRADED'} ({len(record['nodes'])} nodes), {where}"
    tail = f"  client commands: . {s.state_dir / 'env.sh'}  (or chainermn-rt sandbox exec -- CMD)"
    return Status(up=ok, nodes=nodes, lines=[head, *lines, tail])


def database(s: SandboxSettings, slurm: Slurm) -> str:
    """One line: the accounting database, its size, and what slurmdbd answers of it."""
    size = sum(p.stat().st_size for p in accounting.data_dir(s).rglob("*") if p.is_file())
    where = f"  accounting: MariaDB in {accounting.data_dir(s)} ({size / 1e6:.0f} MB), slurmdbd"
    try:
        proc = slurm.run(["sacctmgr", "-n", "-P", "show", "qos", "format=name,gracetime,preempt"],
                         timeout=20)
    except subprocess.TimeoutExpired:
        return f"{where} NOT answering"
    qos = [line.split("|") for line in proc.stdout.split()]
    if proc.returncode != 0 or not qos:
        return f"{where} NOT answering"
    said = ", ".join(q[0] + (f" (grace {q[1]})" if q[1] != "00:00:00" else "")
                     + (f" (preempts {q[2]})" if q[2] else "") for q in qos if len(q) == 3)
    return f"{where}: QOS {said}"
