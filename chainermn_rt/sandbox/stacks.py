"""The sandbox's stacks: whose Slurm, munge, MariaDB, PMIx and Open MPI its daemons, client
commands and jobs run.

- ``debian12`` (the default): the host's own Debian 12 packages (Slurm 22.05, PMIx 4.2,
  Open MPI 4.1).
- ``debian13``: the Debian 13 root of :mod:`chainermn_rt.sandbox.root` (Slurm 24.11, PMIx 5,
  Open MPI 5, Apptainer 1.4.5): every program runs inside it through its one wrapper, in the
  same namespaces.

A :class:`Launcher` gives the command line before a program for each place it runs: the host's
namespaces (munged), the head namespace (slurmctld, slurmdbd, MariaDB, client commands) and a
node's (slurmd, and so every job step).

>>> from chainermn_rt.site import load_site, resolve_site
>>> from chainermn_rt.sandbox.settings import sandbox_settings
>>> s = sandbox_settings(load_site(resolve_site("sandbox")), state_dir="/s")
>>> Launcher(s).head()[-4:]
['sh', '-c', 'hostname "$0" && exec "$@"', 'head']
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from chainermn_rt.sandbox import netns, pyxis, scratch
from chainermn_rt.sandbox.pyxis_build import Tools
from chainermn_rt.sandbox.root import Bind, Root, enter_argv
from chainermn_rt.sandbox.settings import DEBIAN13, SandboxSettings
from chainermn_rt.site import checkout

MOUNT_HOSTS = 'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"'
SET_HOSTNAME = 'hostname "$0" && exec "$@"'
FUSE = "dev/fuse"  # in the state folder: /dev/fuse for every user (debian13's, pyxis's nodes)
FUSE_NUMBERS = (10, 229)
# System prefixes the root has its own of: never bound over it.
_SYSTEM = ("/", "/usr", "/usr/local", "/bin", "/lib", "/etc", "/var", "/opt")


@dataclass(frozen=True)
class Launcher:
    """Command-line prefixes for ``settings``' stack; ``root`` for ``debian13``; ``tools``:
    enroot and pyxis, for a sandbox whose nodes load pyxis; ``docker``: the socket bound at
    each node's /run/docker.sock (debian13)."""

    settings: SandboxSettings
    root: Root | None = None
    tools: Tools | None = None
    docker: Path | None = None  # a dockerd's socket for the nodes (pyxis's dockerd://)

    @property
    def in_root(self) -> bool:
        return self.settings.stack == DEBIAN13

    def binds(self) -> list[Bind]:
        """What every program of the root sees of the host, at the same paths: /tmp (jobs'
        folders, as on the Debian 12 stack), the state folder, the checkout (the bundle, its
        venv) and the interpreter that venv links to."""
        state = self.settings.state_dir
        found = [Path("/tmp"), state]
        bundle = checkout()
        if bundle is not None:
            found.append(bundle)
        if sys.base_prefix not in _SYSTEM and not sys.base_prefix.startswith("/usr/"):
            found.append(Path(sys.base_prefix))
        if self.tools:  # enroot and pyxis, for slurmd and the client commands (plugstack.conf)
            found.append(self.tools.folder)
        unique = sorted({p for p in found if p.is_dir()}, key=lambda p: len(p.parts))
        return list(unique)

    def _enter(self, extra: list[Bind], hostname: str | None) -> list[str]:
        assert self.root is not None, "the debian13 stack needs its root"
        return enter_argv(self.root, [*self.binds(), *extra], hostname=hostname)

    def hosts(self) -> Path:
        return self.settings.state_dir / "etc" / "hosts"

    def host(self) -> list[str]:
        """A program in the host's namespaces (munged, mariadb-install-db)."""
        return self._enter([], None) if self.in_root else []

    def head(self, hostname: bool = True) -> list[str]:
        """A program in the head network namespace, with the head's hostname (``hostname``)."""
        net = ["nsenter", f"--net={netns.path(self.settings.netns(netns.HEAD))}"]
        if self.in_root:
            return [*net, *self._enter([(self.hosts(), "/etc/hosts")],
                                       netns.HEAD if hostname else None)]
        return [*net, "unshare", "--uts", "sh", "-c", SET_HOSTNAME, netns.HEAD] if hostname \
            else net

    def client(self) -> list[str]:
        """What a client command entered from the host runs through, after ``nsenter`` into
        the head namespace (empty on the host's own stack)."""
        return self._enter([(self.hosts(), "/etc/hosts")], netns.HEAD) if self.in_root else []

    def node(self, node: str) -> list[str]:
        """A node's slurmd: the node's network, UTS and mount namespaces, its hostname, the
        sandbox's /etc/hosts, the node's own scratch at every ``local_scratch`` path; with
        ``tools``, the sandbox's enroot configuration, enroot on PATH and in /usr/local/bin."""
        s = self.settings
        net = ["nsenter", f"--net={netns.path(s.netns(node))}"]
        fuse = s.state_dir / FUSE if (s.state_dir / FUSE).exists() else None
        binds = pyxis.node_binds(s, self.tools, None if self.in_root else fuse) \
            if self.tools else []
        env = pyxis.node_env(self.tools) if self.tools else []
        if not self.in_root:
            mounts = [w for source, target in binds
                      for w in ("sh", "-c", scratch.MOUNT_ONE, str(source), str(target))]
            if self.tools:
                mounts += pyxis.epilog_overlay(self.tools)
            return [*net, "unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c",
                    MOUNT_HOSTS, node, str(self.hosts()), *scratch.mount_argv(s, node),
                    *mounts, *env]
        extra: list[Bind] = [(self.hosts(), "/etc/hosts")]
        if (s.state_dir / FUSE).exists():
            extra.append((s.state_dir / FUSE, "/dev/fuse"))
        extra += [(scratch.node_folder(s, node), path) for path in s.scratch]
        if self.tools:  # the root's /usr/local/bin is empty
            extra.append((self.tools.bin, pyxis.EPILOG_BIN))
        if self.tools and self.docker:  # the root's /run is a tmpfs of its own
            extra.append((self.docker, pyxis.DOCKER_SOCKET))
        return [*net, *self._enter([*extra, *binds], node), *env]

    def slurmdbd_env(self) -> list[str]:
        """``env`` arguments for slurmdbd: in the root, the older client library of MariaDB
        (root.py's ``[older]`` pins: trixie's fails slurmdbd's first query)."""
        path = self.root.pins.library_path() if self.root else None
        return [f"LD_LIBRARY_PATH={path}"] if path else []

    def program(self, name: str) -> str:
        """Where a client command is, for the client wrappers."""
        if self.in_root:
            return f"/usr/bin/{name}"
        return shutil.which(name, path="/usr/bin:/usr/local/bin:/bin") or f"/usr/bin/{name}"
