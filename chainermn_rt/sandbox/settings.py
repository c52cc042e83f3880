"""Where a sandbox lives and what it is called: everything follows from its state folder.

The folder is ``--state``, else ``$CHAINERMN_RT_SANDBOX``, else the checkout's ``build/sandbox``
(or ``~/.local/state/chainermn-rt/sandbox`` for an installed wheel): never the current
directory. Its network namespaces are named after a hash of the folder, so two checkouts run
two sandboxes side by side; addresses and ports exist only inside each sandbox's namespaces
and never collide.

>>> from chainermn_rt.site import load_site, resolve_site
>>> s = sandbox_settings(load_site(resolve_site("sandbox")), state_dir="/tmp/sbx")
>>> s.nodes, str(s.node_address(1)), s.netns("node1")
(2, '10.213.0.2', 'cmrtfb0cbd-node1')
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from dataclasses import dataclass, replace
from pathlib import Path

from chainermn_rt.errors import UserError
from chainermn_rt.site import (
    SANDBOX_MAX_NODES,
    SANDBOX_STACKS,
    Site,
    checkout,
    sandbox_max_nodes,
)

STATE_VAR = "CHAINERMN_RT_SANDBOX"
# The stacks (stacks.py): the host's Debian 12 packages, or the Debian 13 root (root.py).
DEBIAN12, DEBIAN13 = SANDBOX_STACKS
STACKS = {DEBIAN12: "the host's Debian 12 packages: Slurm 22.05, PMIx 4.2, Open MPI 4.1",
          DEBIAN13: "a Debian 13 root: Slurm 24.11, PMIx 5, Open MPI 5, Apptainer 1.4.5"}
DEFAULT_STACK = DEBIAN12
# The Debian 12 stack's unprivileged user for jobs (`make setup` adds it to the host; the
# debian13 root has its own, slurm/sandbox/debian13.toml)
HOST_USER = "chainermn"


def default_state_dir() -> Path:
    """The state folder when none is given (see the module's docstring)."""
    if os.environ.get(STATE_VAR):
        return Path(os.environ[STATE_VAR]).absolute()
    found = checkout()
    if found is not None:
        return found / "build" / "sandbox"
    state_home = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(state_home) / "chainermn-rt" / "sandbox"


def prefix_for(state_dir: Path) -> str:
    """``cmrt`` and 6 hex digits of the folder's path: the names of its namespaces."""
    return "cmrt" + hashlib.sha256(str(state_dir).encode()).hexdigest()[:6]


@dataclass(frozen=True)
class SandboxSettings:
    subnet: ipaddress.IPv4Network
    state_dir: Path
    nodes: int
    hwloc_xml: Path | None = None
    # the profile's local_scratch paths: each node's own folder is mounted there (scratch.py)
    scratch: tuple[str, ...] = ()
    accounting: bool = False  # MariaDB + slurmdbd (accounting.py)
    stack: str = DEFAULT_STACK  # whose Slurm, MPI and Apptainer (stacks.py)
    pyxis: bool = False  # the profile's runtime: its nodes load pyxis, with enroot (pyxis.py)

    @property
    def prefix(self) -> str:
        return prefix_for(self.state_dir)

    @property
    def tmpfs(self) -> str:
        """slurm.conf's TmpFS: each node's own temporary folder, by its name in the state
        folder; with pyxis one path on each node's own scratch (enroot's PMI hook reads it from
        ``scontrol show config``, ``%n`` unexpanded)."""
        return self._node_folder("tmp")

    @property
    def spool_dir(self) -> str:
        """slurm.conf's SlurmdSpoolDir, as :attr:`tmpfs`."""
        return self._node_folder("spool")

    def _node_folder(self, name: str) -> str:
        if self.pyxis and self.scratch:
            return f"{self.scratch[0]}/slurm/{name}"
        return f"{self.state_dir}/{name}/%n"

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


def spanning(site: Site, nodes: int) -> Site:
    """``site`` with every partition ``nodes`` nodes large: in a sandbox each partition spans
    all its nodes (slurm.conf's ``Nodes=node[1-N] MaxNodes=N``), whatever count it was started
    with (``sandbox up --nodes 16`` on a profile of 2-node partitions).

    >>> from chainermn_rt.site import load_site, resolve_site
    >>> [p.nodes for p in spanning(load_site(resolve_site("sandbox")), 16).partitions]
    [16, 16]
    """
    return replace(site, partitions=tuple(replace(p, nodes=nodes) for p in site.partitions))


def sandbox_settings(site: Site, nodes: int | None = None,
                     state_dir: str | Path | None = None,
                     stack: str | None = None) -> SandboxSettings:
    """The settings of ``site``'s sandbox; ``nodes``, ``state_dir`` and ``stack`` (CLI)
    override it (the stack: the profile's ``[sandbox] stack``, else the default)."""
    if stack is not None and stack not in STACKS:
        raise UserError(f"--stack: {stack!r} is not allowed; allowed: {', '.join(STACKS)}")
    if site.sandbox is None:
        raise UserError(f"--site: site {site.name!r} has no [sandbox] table; allowed: a sandbox "
                        "profile such as 'sandbox'")
    most = sandbox_max_nodes(site.sandbox.subnet)
    if nodes is not None and not 1 <= nodes <= most:
        raise UserError(f"--nodes: {nodes!r} is not allowed; allowed: 1-{most}"
                        + ("" if most == SANDBOX_MAX_NODES else
                           f" (the addresses of [sandbox] subnet {site.sandbox.subnet})"))
    count = nodes or site.sandbox.nodes or max(p.nodes for p in site.partitions)
    folder = Path(state_dir).absolute() if state_dir is not None else default_state_dir()
    return SandboxSettings(subnet=site.sandbox.subnet, state_dir=folder,
                           nodes=min(count, most), hwloc_xml=site.sandbox.hwloc_xml,
                           scratch=tuple(sorted({p.local_scratch for p in site.partitions
                                                 if p.local_scratch})),
                           accounting=site.sandbox.accounting,
                           stack=stack or site.sandbox.stack or DEFAULT_STACK,
                           pyxis=site.container.runtime == "pyxis")
