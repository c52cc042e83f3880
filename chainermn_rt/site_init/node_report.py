"""What one node says about itself: a POSIX ``sh`` script run as a one-task Slurm step, and
the parser of its output.

The script needs nothing on the node but ``sh`` and hwloc's ``lstopo``; every section is
optional. ``--whole-system`` matters: inside the step's cgroup hwloc would show only the CPUs
the step may use.

>>> report = parse(SCRIPT_OUTPUT_EXAMPLE)
>>> report.hostname, report.runtimes, report.enroot.hooks, report.socket_ifname
('node1', ('ch-run',), (), 'eth0')
>>> report.ib_ports
(('mlx5_0', 1, '4: ACTIVE', '400 Gb/sec (4X NDR)', 'InfiniBand'),)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chainermn_rt.errors import message_value
from chainermn_rt.runtimes import RUNTIMES, enroot_probe

MARK = "@@chainermn-rt "
RUNTIME_COMMANDS = tuple(r.command for r in RUNTIMES.values() if r.command)
PMI_HOOK = enroot_probe.PMI_HOOK  # enroot's hook for Slurm's PMI(x) (off by default)

# $1: the controller's address (for the route to it)
SCRIPT = f"""\
m() {{ echo "{MARK}$1"; }}
m hostname; hostname
m lstopo; lstopo --whole-system --of xml 2>/dev/null
m ib
for port in /sys/class/infiniband/*/ports/*; do
  [ -r "$port/state" ] || continue
  rate=$(cat "$port/rate" 2>/dev/null); link=$(cat "$port/link_layer" 2>/dev/null)
  echo "$port|$(cat "$port/state")|$rate|$link"
done
for info in /proc/driver/nvidia/gpus/*/information; do
  [ -r "$info" ] && {{ m nvidia; cat "$info"; }}
done
m nvidia-smi; command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi topo -m 2>/dev/null
m runtimes
for c in {' '.join(RUNTIME_COMMANDS)}; do command -v "$c" >/dev/null 2>&1 && echo "$c"; done
{enroot_probe.SCRIPT}m route; ip -o route get "$1" 2>/dev/null
m end
"""


@dataclass(frozen=True)
class NodeReport:
    """One node's answers; empty where the node had nothing to say."""

    hostname: str
    lstopo_xml: str
    ib_ports: tuple[tuple[str, int, str, str, str], ...]  # (device, port, state, rate, link)
    nvidia_information: tuple[str, ...]  # one /proc/driver/nvidia/gpus/*/information each
    nvidia_smi_topo: str
    runtimes: tuple[str, ...]
    enroot: enroot_probe.EnrootReport  # its command None where enroot was not found
    socket_ifname: str | None  # the interface of the route to the controller


def sections(text: str) -> list[tuple[str, str]]:
    """``(name, body)`` in the order printed; a name may repeat (``nvidia``, one per GPU)."""
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(MARK):
            found.append((line[len(MARK):].strip(), []))
        elif found:
            found[-1][1].append(line)
    return [(name, "\n".join(body).strip("\n")) for name, body in found]


class Unfinished(ValueError):
    """The probe's output ends before its last section: the step was cut short."""


# a network interface as Linux names it (at most 15 characters), as this bundle takes it
IFNAME = re.compile(r"[A-Za-z0-9_.@+-]{1,15}\Z")


def _enroot(text: str) -> enroot_probe.EnrootReport:
    try:
        return enroot_probe.parse(text)
    except ValueError as err:
        raise ValueError(f"enroot: {err}") from None


def parse(text: str) -> NodeReport:
    """The probe's output; :class:`Unfinished` when it did not run to its end, ValueError
    naming the section when a value is not what the script prints."""
    parts = sections(text)
    if not parts or parts[-1][0] != "end":
        raise Unfinished("the probe did not finish (its last section is missing)")
    one = {name: body for name, body in parts}
    ports = []
    for line in one.get("ib", "").splitlines():
        path, *fields = line.split("|")
        m = re.search(r"/infiniband/([^/]+)/ports/([0-9]{1,3})$", path)
        if m and len(fields) == 3:
            ports.append((m.group(1), int(m.group(2)), *(f.strip() for f in fields)))
    enroot = _enroot(text)
    route = re.search(r"\bdev (\S+)", one.get("route", ""))
    if route and not IFNAME.match(route.group(1)):
        raise ValueError(f"route: interface {message_value(route.group(1), 40)}; allowed: a "
                         "network interface's name")
    return NodeReport(
        hostname=one.get("hostname", "").strip(),
        lstopo_xml=one.get("lstopo", ""),
        ib_ports=tuple(ports),
        nvidia_information=tuple(body for name, body in parts if name == "nvidia"),
        nvidia_smi_topo=one.get("nvidia-smi", ""),
        runtimes=tuple(r for r in one.get("runtimes", "").split() if r in RUNTIME_COMMANDS)
        + (("enroot",) if enroot.command and "enroot" not in one.get("runtimes", "") else ()),
        enroot=enroot,
        socket_ifname=route.group(1) if route and route.group(1) != "lo" else None)


SCRIPT_OUTPUT_EXAMPLE = f"""{MARK}hostname
node1
{MARK}lstopo
<topology version="2.0"/>
{MARK}ib
/sys/class/infiniband/mlx5_0/ports/1|4: ACTIVE|400 Gb/sec (4X NDR)|InfiniBand
{MARK}nvidia-smi
{MARK}runtimes
ch-run
{MARK}enroot-command
{MARK}enroot-run
no enroot on PATH (/usr/bin:/bin)
{MARK}route
10.213.0.1 dev eth0 src 10.213.0.2 uid 0 \\    cache
{MARK}end
"""
