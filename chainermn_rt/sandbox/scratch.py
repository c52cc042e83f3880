"""Node-local scratch for the sandbox's nodes, as a real cluster's nodes each have their own.

Every path the profile names in ``local_scratch`` is, inside each node's mount namespace, that
node's own folder ``STATE/scratch/NODE`` bind-mounted over it: the same path on every node,
different files. On the host the path is an empty folder (the mount point) that ``up`` makes
and ``down`` removes once no sandbox on this machine has nodes left.

>>> from chainermn_rt.site import load_site, resolve_site
>>> from chainermn_rt.sandbox.settings import sandbox_settings
>>> s = sandbox_settings(load_site(resolve_site("sandbox")), state_dir="/s")
>>> mount_argv(s, "node2")
['sh', '-c', 'mount --bind "$0" "$1" && shift && exec "$@"', '/s/scratch/node2', \
'/tmp/chainermn-rt-sandbox-scratch']
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from chainermn_rt.errors import UserError
from chainermn_rt.sandbox import netns
from chainermn_rt.sandbox.settings import SandboxSettings

# Bind "$0" over "$1" in the current mount namespace, then run the rest of the command line.
MOUNT_ONE = 'mount --bind "$0" "$1" && shift && exec "$@"'
# Any sandbox's node namespace (settings.prefix_for + "-nodeN").
_NODE_NETNS = re.compile(r"cmrt[0-9a-f]{6}-node[0-9]+\Z")


def node_folder(s: SandboxSettings, node: str) -> Path:
    return s.state_dir / "scratch" / node


def mount_argv(s: SandboxSettings, node: str) -> list[str]:
    """Put before a node's slurmd command line, inside its mount namespace: binds the node's
    scratch folder over each local_scratch path."""
    argv: list[str] = []
    for path in s.scratch:
        argv += ["sh", "-c", MOUNT_ONE, str(node_folder(s, node)), path]
    return argv


def check(s: SandboxSettings) -> None:
    """Refuse a local_scratch path that is on the host and not an empty folder: the nodes'
    mounts would hide what is there (``/tmp``, say)."""
    for path in s.scratch:
        p = Path(path)
        if p.is_symlink() or (p.exists() and (not p.is_dir() or any(p.iterdir()))):
            raise UserError(f"local_scratch: {path} is not an empty folder on this machine; "
                            "allowed: a new or empty folder (the sandbox mounts each node's "
                            "own scratch folder there)")


def make(s: SandboxSettings) -> None:
    """Each node's scratch folder in the state folder, and the mount points on the host."""
    for node in s.node_names():
        node_folder(s, node).mkdir(parents=True, exist_ok=True)
        os.chmod(node_folder(s, node), 0o1777)  # as /tmp: any user's jobs stage there
    for path in s.scratch:
        Path(path).mkdir(parents=True, exist_ok=True)


def clear(s: SandboxSettings, netns_dir: Path = netns.NETNS_DIR) -> None:
    """After ``down``: every node's scratch removed; the mount points too once no sandbox on
    this machine has a node left (removing one under a running sandbox's nodes would detach
    their mounts)."""
    shutil.rmtree(s.state_dir / "scratch", ignore_errors=True)
    try:
        if any(_NODE_NETNS.match(p.name) for p in netns_dir.iterdir()):
            return
    except FileNotFoundError:
        pass
    for path in s.scratch:
        try:
            os.rmdir(path)
        except OSError:  # gone already, or someone put something there: leave it
            pass
