"""What a sandbox whose profile runs pyxis adds to its nodes, as a site's nodes have it.

- ``STATE/etc/plugstack.conf``: ``required TOOLS/lib/slurm/spank_pyxis.so runtime_path=LOCAL/pyxis
  use_squashfuse=true container_scope=job`` (slurm.conf's ``PlugStackConfig``: slurmd and the
  client commands load it). pyxis makes its runtime folder, whose parent must exist, when
  slurmd starts: node-local here. With squashfuse (each node's /dev/fuse open to every user, as
  on a Debian host) enroot runs the image mounted, not a copy unpacked for every step. With
  ``container_scope=job`` a named container belongs to its job, and pyxis's job epilog removes
  it on every node however the job ended (pyxis's default, ``global``, keeps it).
- ``STATE/etc/enroot``: enroot's configuration folder as sites keep it (the install's hooks,
  mounts and environment, ``50-slurm-pmi.sh`` enabled), bound over the install's ``etc/enroot``
  in each node's mount namespace (enroot reads the folder it was built with). Its
  ``enroot.conf`` (its import's temporary SquashFS uncompressed) puts every user's runtime,
  cache and data folders on the node's own scratch (LOCAL: the profile's ``local_scratch``,
  each node's ``STATE/scratch/NODE``) with ``${UID}``;
  its ``mounts.d`` brings the sandbox's TaskProlog into every container (Slurm runs it inside).
  On the debian13 stack there is no TaskProlog: Slurm 24.11 runs it through slurmstepd, which
  would have to be in the container with its libraries and a glibc as new as the nodes'
  (NVIDIA/pyxis#163); the profile sets what it exported (``socket_ifname``).
- enroot on slurmd's PATH (pyxis runs it with slurmstepd's PATH and nothing else of its own),
  and in ``/usr/local/bin`` of each node's mount namespace (an overlay over the host's, a bind
  over the root's empty one): pyxis's job epilog runs ``enroot list`` with
  ``PATH=/usr/local/bin:/usr/bin:/bin`` (without it, "pyxis: epilog: couldn't get list of
  existing containers" after every job, and Slurm drains the nodes: "Epilog error").
- on the debian13 stack, the dockerd that ``DOCKER_HOST`` (``unix://PATH``) names at ``up``:
  its socket bound at each node's ``/run/docker.sock``, the docker CLI's default, as on a site
  whose nodes run Docker (pyxis's ``--container-image=dockerd://IMAGE`` runs ``enroot import
  dockerd://``, which runs the root's ``docker``; pyxis hands enroot only the job's variables).
  The socket stays root's: only root's jobs may import from it.
- slurm.conf's ``SlurmdSpoolDir`` and ``TmpFS`` on the node's scratch (``LOCAL/slurm/...``), not
  ``STATE/spool/%n``: enroot's PMI hook reads them from ``scontrol show config``, ``%n``
  unexpanded, and mounts PMIx's folders below them into the container.

>>> from chainermn_rt.site import load_site, resolve_site
>>> from chainermn_rt.sandbox.settings import sandbox_settings
>>> s = sandbox_settings(load_site(resolve_site("sandbox-pyxis")), state_dir="/s")
>>> t = pyxis_build.Tools(Path("/t"))
>>> print(plugstack(s, t), end="")
required /t/lib/slurm/spank_pyxis.so runtime_path=/tmp/chainermn-rt-sandbox-scratch/pyxis \
use_squashfuse=true container_scope=job
>>> print(enroot_conf(s).splitlines()[-1])
ENROOT_DATA_PATH /tmp/chainermn-rt-sandbox-scratch/enroot/data/user-${UID}
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from chainermn_rt.errors import UserError
from chainermn_rt.quoting import sh, word
from chainermn_rt.sandbox import pyxis_build, scratch
from chainermn_rt.sandbox.settings import DEBIAN12, SandboxSettings

PLUGSTACK = "etc/plugstack.conf"
ENROOT_ETC = "etc/enroot"                 # in the state folder
PMI_HOOK = "50-slurm-pmi.sh"              # enroot's hook for Slurm's PMI(x) in containers
MOUNTS = "mounts.d/90-chainermn-rt-sandbox.fstab"
FOLDERS = ("runtime", "cache", "data", "tmp")  # LOCAL/enroot/..., 1777 on every node
SLURM_FOLDERS = {"spool": 0o755, "tmp": 0o1777}  # LOCAL/slurm/...: SlurmdSpoolDir, TmpFS
# enroot's per-user folders (runtime, cache, data); its temporary files in LOCAL/enroot/tmp
PER_USER = {"ENROOT_RUNTIME_PATH": "runtime", "ENROOT_CACHE_PATH": "cache",
            "ENROOT_DATA_PATH": "data"}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
EPILOG_BIN = Path("/usr/local/bin")  # the first folder of the PATH of pyxis's job epilog
DOCKER_SOCKET = Path("/run/docker.sock")  # in each node: the docker CLI's default
SQUASH_OPTIONS = "-noI -noD -noF -noX -no-duplicates"  # mksquashfs's: no compression
OVERLAY = 'mount -t overlay overlay -o "lowerdir=$0:$1" "$1" && shift && exec "$@"'


def local(s: SandboxSettings) -> str:
    """The node-local folder enroot and pyxis keep their state in: the profile's
    ``local_scratch`` (the first, where partitions name several)."""
    if not s.scratch:
        raise UserError("local_scratch: a sandbox with pyxis needs one (enroot's and pyxis's "
                        "folders go there, each node's own); allowed: a path such as "
                        "/tmp/chainermn-rt-sandbox-scratch")
    return s.scratch[0]


def plugstack(s: SandboxSettings, tools: pyxis_build.Tools) -> str:
    """pyxis's line; ``use_squashfuse``: enroot starts a container on the image mounted by
    squashfuse, not on a copy unpacked for each step (12 s a step for the cpu image here);
    ``container_scope=job``: the job's named containers are its own, removed when it ends."""
    return (f"required {word(str(tools.plugin), 'the pyxis plugin')} "
            f"runtime_path={word(local(s) + '/pyxis', 'local_scratch')} use_squashfuse=true "
            "container_scope=job\n")


def enroot_conf(s: SandboxSettings) -> str:
    """enroot.conf: each value is evaluated by bash (``eval echo``), hence ``sh`` quoting and
    the one unquoted ``${UID}``."""
    base = f"{local(s)}/enroot"
    lines = ["# Generated by chainermn-rt sandbox: each node's own folders (LOCAL is that node's",
             "# scratch), one per user; docs/sandbox.md.",
             "# pyxis's import of a registry's image (dockerd://) writes a SquashFS it unpacks",
             "# and removes at once: uncompressed, 15 s instead of 41 s for the cpu image here.",
             f"ENROOT_SQUASH_OPTIONS {sh(SQUASH_OPTIONS)}",
             f"ENROOT_TEMP_PATH {sh(base + '/tmp', 'local_scratch')}"]
    lines += [f"{name} {sh(f'{base}/{sub}', 'local_scratch')}/user-${{UID}}"
              for name, sub in PER_USER.items()]
    return "\n".join(lines) + "\n"


def task_prolog(s: SandboxSettings) -> bool:
    """Whether the pyxis sandbox has a TaskProlog: Slurm 22.05's (debian12) runs it in the
    container as a script; 24.11's through slurmstepd (see the module's docstring)."""
    return s.stack == DEBIAN12


def container_files(s: SandboxSettings) -> list[Path]:
    """Host files every container must see at the same path: the TaskProlog (Slurm runs it in
    the task, which pyxis has put in the container), the hwloc XML it names."""
    if not task_prolog(s):
        return []
    files = [s.state_dir / "etc" / "task_prolog.sh"]
    if s.hwloc_xml is not None:
        files.append(Path(s.hwloc_xml))
    return files


def mounts(s: SandboxSettings) -> str:
    lines = ["# Generated by chainermn-rt sandbox: what the TaskProlog needs inside containers"]
    for path in container_files(s):
        p = word(str(path), "the sandbox's state folder")
        lines.append(f"{p} {p} none x-create=file,bind,ro,nosuid,nodev,private 0 -1")
    return "\n".join(lines) + "\n"


def files(s: SandboxSettings, tools: pyxis_build.Tools) -> dict[str, str]:
    """Every file of the sandbox's pyxis, keyed by its path in the state folder: the install's
    enroot configuration with the PMI hook enabled, then the sandbox's own files."""
    out = {}
    for path in sorted(tools.sysconf.rglob("*")):
        if path.is_file():
            out[f"{ENROOT_ETC}/{path.relative_to(tools.sysconf)}"] = path.read_text()
    out[f"{ENROOT_ETC}/hooks.d/{PMI_HOOK}"] = (tools.extra_hooks / PMI_HOOK).read_text()
    out[f"{ENROOT_ETC}/enroot.conf"] = enroot_conf(s)
    if container_files(s):
        out[f"{ENROOT_ETC}/{MOUNTS}"] = mounts(s)
    out[PLUGSTACK] = plugstack(s, tools)
    return out


def check(s: SandboxSettings, tools: pyxis_build.Tools) -> None:
    """What the files need of the profile and the state folder, refused before any start."""
    plugstack(s, tools)
    mounts(s)


def make_folders(s: SandboxSettings) -> None:
    """enroot's folders in every node's scratch, writable by every user (as /tmp)."""
    for node in s.node_names():
        for sub in FOLDERS:
            folder = scratch.node_folder(s, node) / "enroot" / sub
            folder.mkdir(parents=True, exist_ok=True)
            os.chmod(folder, 0o1777)
        os.chmod(scratch.node_folder(s, node) / "enroot", 0o755)
        for sub, mode in SLURM_FOLDERS.items():
            folder = scratch.node_folder(s, node) / "slurm" / sub
            folder.mkdir(parents=True, exist_ok=True)
            os.chmod(folder, mode)


def node_binds(s: SandboxSettings, tools: pyxis_build.Tools, fuse: Path | None
               ) -> list[tuple[Path, Path]]:
    """(source, target) to bind in each node's mount namespace: the sandbox's enroot
    configuration over the install's; ``fuse``, a /dev/fuse every user may open (squashfuse:
    the host's is 0600 here, a Debian host's 0666), over /dev/fuse."""
    return [(s.state_dir / ENROOT_ETC, tools.sysconf),
            *([(fuse, Path("/dev/fuse"))] if fuse is not None else [])]


def docker_socket(env: dict[str, str]) -> Path | None:
    """The socket of the dockerd ``DOCKER_HOST`` names in ``env`` (``unix://PATH``, a socket
    here), for the nodes' ``enroot import dockerd://``; None without one."""
    host = env.get("DOCKER_HOST", "")
    if not host.startswith("unix://"):
        return None
    path = Path(host[len("unix://"):])
    try:
        return path if stat.S_ISSOCK(path.stat().st_mode) else None
    except OSError:
        return None


def epilog_overlay(tools: pyxis_build.Tools) -> list[str]:
    """Before slurmd on the host's stack, inside the node's mount namespace: enroot's folder
    laid over the host's /usr/local/bin (whose programs stay), where the job epilog finds it."""
    return ["sh", "-c", OVERLAY, str(tools.bin), str(EPILOG_BIN)]


def node_env(tools: pyxis_build.Tools) -> list[str]:
    """``env`` arguments before slurmd: enroot on its PATH (slurmstepd's, which pyxis keeps)."""
    return ["env", f"PATH={tools.bin}:{PATH}"]
