"""The host libraries a job binds into its container (interconnect.py: the host's MPI, a
fabric provider, NCCL's net plugin), checked before a rank starts, as Sarus's hooks check:

- the MPI library is a shared object of the profile's family (its soname: ``libmpi.so.12`` for
  mpich, or Debian's ``libmpich.so.12`` through a link named ``libmpi.so.12``; ``libmpi.so.40``
  for openmpi; the MPI 5.0 standard ABI's ``libmpi_abi`` has no back-end in the mpi4py the
  images carry) and exports ``MPI_Init``;
- NCCL's plugin is a shared object exporting ``ncclNet_v*`` (or ``ncclNetPlugin_v*``);
- nothing bound needs a newer glibc than the image's: the library and every library it needs
  that the bound folders hold (``GLIBC_2.38`` needed, glibc 2.36 in the image: the loader
  would refuse it on every rank).

:func:`at_render` runs where the job is made, on the files this machine sees (the login node
sees the cluster's file systems); :func:`in_rank` runs in the rank step, inside the container,
before the command and its ``MPI_Init``. Each failure is one line naming the library, what it
needs and what the image has.

>>> from chainermn_rt.interconnect import MpiModel
>>> model = MpiModel("bind", "openmpi", "/usr/lib/x86_64-linux-gnu/libmpi.so.40",
...                  ("/usr/lib/x86_64-linux-gnu",))
>>> at_render(model, NcclNet(), image_glibc=(2, 36)) is None   # Debian 12's Open MPI 4.1.4
True
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from chainermn_rt.elf import ElfError, ElfInfo, glibc_needed, read_elf
from chainermn_rt.errors import UserError
from chainermn_rt.interconnect import SONAMES, MpiModel, NcclNet

ABI_SONAME = re.compile(r"libmpi_abi\.so")
# Debian's and Ubuntu's MPICH: mpi4py's mpich back-end needs libmpi.so.12, so a site links that
# name to it in a folder the job binds (the rank step puts that folder first on the path)
DEBIAN_MPICH = "libmpich.so.12"
PLUGIN_SYMBOL = re.compile(r"ncclNet(Plugin)?_v\d+\Z")
MAX_LIBRARIES = 256  # a closure past this is not an MPI's


def _read(path: str, field: str) -> ElfInfo:
    try:
        return read_elf(path)
    except ElfError as err:
        raise UserError(f"{field}: {err}; allowed: a shared library") from None


def check_family(info: ElfInfo, family: str, field: str) -> None:
    """UserError when ``info`` is not a libmpi of ``family``'s ABI."""
    soname = info.soname or os.path.basename(info.path)
    if ABI_SONAME.match(soname):
        raise UserError(f"{field}: {info.path} is the MPI 5.0 standard ABI's {soname}, which "
                        "the images' mpi4py 4.1.2 cannot load (its back-ends: mpich, openmpi); "
                        f"allowed: the library behind {SONAMES[family]}")
    if family == "mpich" and soname == DEBIAN_MPICH and \
            os.path.basename(info.path) == SONAMES[family]:
        soname = SONAMES[family]  # Debian's MPICH behind the link a site makes
    if soname != SONAMES[family]:
        other = next((f for f, s in SONAMES.items() if s == soname), None)
        said = f"the {other} family's {soname}" if other else f"soname {soname}"
        raise UserError(f"{field}: {info.path} has {said}; allowed with family = \"{family}\": "
                        f"a library whose soname is {SONAMES[family]}")
    if "MPI_Init" not in info.exports:
        raise UserError(f"{field}: {info.path} does not export MPI_Init; allowed: an MPI "
                        "library")


def check_plugin(info: ElfInfo, field: str) -> None:
    if not any(PLUGIN_SYMBOL.match(name) for name in info.exports):
        raise UserError(f"{field}: {info.path} exports no ncclNet_v* symbol; allowed: an NCCL "
                        "net plugin (aws-ofi-nccl's libnccl-net.so)")


def closure(info: ElfInfo, folders: tuple[str, ...]) -> list[ElfInfo]:
    """``info`` and every library it needs, directly or not, that ``folders`` hold (the bound
    ones: what the image itself has is the image's)."""
    found, queue, seen = [info], list(info.needed), {info.path}
    while queue and len(found) < MAX_LIBRARIES:
        name = queue.pop(0)
        path = next((os.path.join(f, name) for f in folders
                     if os.path.isfile(os.path.join(f, name))), None)
        if path is None or path in seen:
            continue
        seen.add(path)
        try:
            more = read_elf(path)
        except ElfError:
            continue  # not the loader's to take: it looks further
        found.append(more)
        queue += more.needed
    return found


def check_glibc(libraries: list[ElfInfo], image_glibc: tuple[int, int], field: str) -> None:
    for info in libraries:
        need = glibc_needed(info)
        if need and need > image_glibc:
            raise UserError(
                f"{field}: {info.path} needs GLIBC_{need[0]}.{need[1]}; the image has glibc "
                f"{image_glibc[0]}.{image_glibc[1]}; allowed: host libraries built for glibc "
                f"{image_glibc[0]}.{image_glibc[1]} or older, or an image of a newer "
                "distribution (the loader would refuse them on every rank)")


def at_render(mpi: MpiModel, nccl: NcclNet, image_glibc: tuple[int, int] | None) -> None:
    """The checks this machine can make of the files it sees (a path it does not see is the
    rank step's to check); ``image_glibc`` where the image's is known."""
    if mpi.bound and os.path.exists(mpi.library):
        info = _read(mpi.library, "mpi.library")
        check_family(info, mpi.family, "mpi.library")
        if image_glibc:
            check_glibc(closure(info, mpi.paths), image_glibc, "mpi.library")
    if nccl.net_plugin and os.path.exists(nccl.net_plugin):
        info = _read(nccl.net_plugin, "nccl.net_plugin")
        check_plugin(info, "nccl.net_plugin")
        if image_glibc:
            check_glibc([info], image_glibc, "nccl.net_plugin")


def running_glibc() -> tuple[int, int] | None:
    """This process's glibc (inside a container: the image's), e.g. (2, 36)."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    found = re.fullmatch(r"glibc (\d+)\.(\d+)(?:\.\d+)?", text)
    return (int(found.group(1)), int(found.group(2))) if found else None


def in_rank(environ: Mapping[str, str], folders: tuple[str, ...]) -> None:
    """The rank step's check of what the job bound (``folders``: the host folders), against
    this container's glibc; UserError for every rank alike."""
    library, family = environ.get("MPI4PY_LIBMPI"), environ.get("MPI4PY_MPIABI")
    plugin = environ.get("NCCL_NET_PLUGIN")
    glibc = running_glibc()
    try:
        if library and family in SONAMES:
            if not os.path.isfile(library):
                raise UserError(f"MPI4PY_LIBMPI: {library} is not in the container; allowed: "
                                "a library in a folder the job binds (mpi.paths)")
            info = _read(library, "MPI4PY_LIBMPI")
            check_family(info, family, "MPI4PY_LIBMPI")
            if glibc:
                check_glibc(closure(info, folders), glibc, "MPI4PY_LIBMPI")
        if plugin and os.path.isabs(plugin) and folders:
            if not os.path.isfile(plugin):
                raise UserError(f"NCCL_NET_PLUGIN: {plugin} is not in the container; allowed: "
                                "a plugin in a folder the job binds")
            info = _read(plugin, "NCCL_NET_PLUGIN")
            check_plugin(info, "NCCL_NET_PLUGIN")
            if glibc:
                check_glibc(closure(info, folders), glibc, "NCCL_NET_PLUGIN")
    except UserError as err:
        raise UserError(str(err), everywhere=True) from None
