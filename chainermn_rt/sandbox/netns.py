"""The sandbox's network: a head namespace with a bridge, one namespace per node on it.

Every name starts with the sandbox's prefix, so the namespaces of one sandbox are found by
name alone, even when its record is lost (a machine restarted, a process killed).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from chainermn_rt.sandbox.settings import SandboxSettings

NETNS_DIR = Path("/run/netns")   # where `ip netns add` pins a namespace
HEAD = "head"


class NetworkError(RuntimeError):
    """An ``ip`` command failed; the message is its own."""


def path(name: str) -> Path:
    return NETNS_DIR / name


def existing(prefix: str) -> list[str]:
    """The namespaces on this machine named ``PREFIX-...``."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix + "-"))
    except FileNotFoundError:
        return []


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


def create(s: SandboxSettings) -> None:
    """The head namespace with bridge ``br0``, and per node a namespace with ``eth0`` on it."""
    head, prefix = s.netns(HEAD), s.subnet.prefixlen
    _ip("netns", "add", head)
    _ip("-n", head, "link", "set", "lo", "up")
    _ip("-n", head, "link", "add", "br0", "type", "bridge", "forward_delay", "0")
    _ip("-n", head, "addr", "add", f"{s.head_address()}/{prefix}", "dev", "br0")
    _ip("-n", head, "link", "set", "br0", "up")
    for i, node in enumerate(s.node_names(), start=1):
        ns = s.netns(node)
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", head, "link", "add", f"veth{i}", "type", "veth", "peer", "name", "eth0",
            "netns", ns)
        _ip("-n", head, "link", "set", f"veth{i}", "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{s.node_address(i)}/{prefix}", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")


def delete(names: list[str]) -> list[str]:
    """Delete namespaces (their bridge and veths go with them); the problems met, one line each."""
    problems = []
    for name in names:
        try:
            _ip("netns", "del", name)
        except NetworkError as err:
            problems.append(str(err))
    return problems
