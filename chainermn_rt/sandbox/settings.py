"""The ``[sandbox]`` table of a site profile: where and how the local Slurm sandbox runs.

Example (slurm/sites/sandbox.toml)::

    [sandbox]
    subnet = "10.213.0.0/24"     # the bridge and node addresses; they exist only in its namespaces
    prefix = "cmrtsbx"           # network namespaces: cmrtsbx-head, cmrtsbx-node1, ...
    state_dir = "build/sandbox"  # relative to the current directory
    nodes = 2                    # default: the largest partition's node count; 1-8

>>> from chainermn_rt.site import load_site, resolve_site
>>> s = sandbox_settings(load_site(resolve_site("sandbox")))
>>> s.nodes, str(s.node_address(1)), s.netns("node1")
(2, '10.213.0.2', 'cmrtsbx-node1')
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from chainermn_rt.errors import UserError
from chainermn_rt.site import Site

MAX_NODES = 8
PREFIX = re.compile(r"[a-z][a-z0-9]{1,9}\Z")
FIELDS = ("subnet", "prefix", "state_dir", "nodes", "controller_port", "slurmd_port")


@dataclass(frozen=True)
class SandboxSettings:
    subnet: ipaddress.IPv4Network
    prefix: str
    state_dir: Path
    nodes: int
    controller_port: int = 6817
    slurmd_port: int = 6818

    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    def head_address(self) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 1

    def node_address(self, index: int) -> ipaddress.IPv4Address:
        """Address of node ``index`` (1-based) on the sandbox bridge."""
        return self.subnet.network_address + 1 + index

    def netns(self, role: str) -> str:
        """Name of a namespace the sandbox creates: role is ``head`` or ``nodeN``."""
        return f"{self.prefix}-{role}"


def sandbox_settings(site: Site, nodes: int | None = None,
                     state_dir: str | Path | None = None) -> SandboxSettings:
    """Validate ``site.sandbox``; ``nodes``/``state_dir`` (from the CLI) override the profile."""
    raw = dict(site.sandbox)
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise UserError(f"sandbox.{unknown[0]}: unknown field; allowed: {', '.join(FIELDS)}")
    subnet = _subnet(raw.get("subnet", "10.213.0.0/24"))
    prefix = raw.get("prefix", "cmrtsbx")
    if not isinstance(prefix, str) or not PREFIX.match(prefix):
        raise UserError(f"sandbox.prefix: {prefix!r} is not allowed; allowed: 2-10 lower-case "
                        "letters and digits, starting with a letter")
    default_nodes = max(p.nodes for p in site.partitions)
    where = "--nodes" if nodes is not None else "sandbox.nodes"
    count = nodes if nodes is not None else raw.get("nodes", default_nodes)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_NODES:
        raise UserError(f"{where}: {count!r} is not allowed; allowed: 1-{MAX_NODES}")
    folder = state_dir if state_dir is not None else raw.get("state_dir", "build/sandbox")
    if not isinstance(folder, (str, Path)) or not str(folder):
        raise UserError(f"sandbox.state_dir: {folder!r} is not allowed; allowed: a folder path")
    ports = {}
    for key, default in (("controller_port", 6817), ("slurmd_port", 6818)):
        port = raw.get(key, default)
        if isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65000:
            raise UserError(f"sandbox.{key}: {port!r} is not allowed; allowed: 1024-65000")
        ports[key] = port
    return SandboxSettings(subnet=subnet, prefix=prefix, state_dir=Path(folder).absolute(),
                           nodes=count, **ports)


def _subnet(text: object) -> ipaddress.IPv4Network:
    """A /28 at least: 14 addresses hold the head and the most nodes (8)."""
    allowed = "a private IPv4 network from /16 to /28, e.g. \"10.213.0.0/24\""
    try:
        net = ipaddress.IPv4Network(text, strict=True) if isinstance(text, str) else None
    except ValueError:
        net = None
    if net is None or not net.is_private or not 16 <= net.prefixlen <= 28 or net.is_loopback:
        raise UserError(f"sandbox.subnet: {text!r} is not allowed; allowed: {allowed}")
    return net
