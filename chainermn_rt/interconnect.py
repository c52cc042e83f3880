"""How the ranks reach the network, from the profile's ``[mpi]``, ``[fabric]`` and ``[nccl]``
tables: which MPI (the image's own, ``hybrid``, the default: its Open MPI talks to the host
Slurm's PMIx; or the host's bound into the container, ``bind``: Cray MPICH on Slingshot, a
site's MPICH, Intel MPI, MVAPICH, or its Open MPI), which fabric the job must get (UCX over
InfiniBand, or libfabric with a named provider: ``cxi``, ``efa``), and NCCL's net plugin::

    [mpi]
    model = "bind"
    family = "mpich"       # the library's ABI: mpich (libmpi.so.12) or openmpi (libmpi.so.40)
    library = "/opt/cray/pe/mpich/8.1.28/ofi/gnu/12.3/lib-abi-mpich/libmpi.so.12"
    paths = ["/opt/cray/pe/mpich/8.1.28/ofi/gnu/12.3/lib-abi-mpich", "/opt/cray/pe/lib64"]

    [fabric]
    kind = "ofi"           # ofi (libfabric) or ucx
    provider = "cxi"       # ofi: the provider the job must get (FI_PROVIDER)
    paths = ["/opt/cray/libfabric/1.20.1/lib64"]

    [nccl]
    net_plugin = "/opt/aws-ofi-nccl/lib/libnccl-net.so"
    net = "AWS Libfabric"  # NCCL_NET: a plugin that does not load fails the job

Each returns the job's variables and the host folders it needs: the Plan binds every folder at
the same path (through the runtime's own mechanism) and the rank step puts them first on
``LD_LIBRARY_PATH`` inside the container (``rank_contract.HOST_LIBS_VAR``; the image's own path
is kept). mpi4py's ``MPI4PY_MPIABI`` and ``MPI4PY_LIBMPI`` choose the library. A family needs the
srun plugin that serves its PMI (:data:`PMI`): MPICH speaks PMI-1/PMI-2, and under
``--mpi=pmix`` its ranks start as N one-rank worlds; Open MPI 5 speaks PMIx only. NCCL's
``NCCL_NET`` is pinned because a plugin that fails to load is only logged (at INFO) and NCCL
falls back to sockets.

>>> model = parse_mpi({"model": "bind", "family": "mpich", "library": "/h/lib/libmpi.so.12",
...                    "paths": ["/h/lib"]})
>>> dict(model.environment())["MPI4PY_MPIABI"], model.paths
('mpich', ('/h/lib',))
>>> parse_mpi({"family": "mpich"})  # doctest: +ELLIPSIS
Traceback (most recent call last):
chainermn_rt.errors.UserError: mpi.family: only with model = "bind"; allowed: ...
>>> dict(parse_nccl({"net_plugin": "/p/libnccl-net.so"}).environment())["NCCL_NET"]
'AWS Libfabric'
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chainermn_rt.errors import UserError, message_value

MODELS = ("hybrid", "bind")
FAMILIES = ("mpich", "openmpi")
# the srun plugins (srun --mpi=) that start a family's ranks in one world
PMI = {"mpich": ("pmi2", "cray_shasta"), "openmpi": ("pmix",)}
# the soname a family's library carries (Cray MPICH's file is libmpi_gnu_123.so.12 behind it)
SONAMES = {"mpich": "libmpi.so.12", "openmpi": "libmpi.so.40"}
_PATH = re.compile(r"/[^\s,:$]*\Z")
PATH_ALLOWED = "an absolute path without spaces, ',', ':' or '$'"


@dataclass(frozen=True)
class MpiModel:
    model: str = "hybrid"
    family: str | None = None
    library: str | None = None
    paths: tuple[str, ...] = ()

    @property
    def bound(self) -> bool:
        return self.model == "bind"

    def environment(self) -> tuple[tuple[str, str], ...]:
        """The job's variables that choose the library (none for the hybrid model)."""
        if not self.bound:
            return ()
        return (("MPI4PY_MPIABI", self.family), ("MPI4PY_LIBMPI", self.library))

    def check_launch(self, launcher: str, srun_mpi: str) -> None:
        """UserError when the launch cannot put the host library's ranks in one world."""
        if not self.bound:
            return
        if launcher != "srun":
            raise UserError(f"--launcher: {launcher} with mpi.model = \"bind\": the host's MPI "
                            "is started by the site's Slurm; allowed: srun")
        if srun_mpi not in PMI[self.family]:
            raise UserError(f"srun_mpi: {srun_mpi} cannot start {self.family}'s ranks in one "
                            f"world (they would start as one-rank worlds); allowed with "
                            f"mpi.family = \"{self.family}\": {' | '.join(PMI[self.family])}")


def host_path(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _PATH.match(value) or not value.isprintable():
        shown = message_value(str(value), quote=True)
        raise UserError(f"{where}: {shown} is not allowed; allowed: {PATH_ALLOWED}")
    return posixpath.normpath(value)


def parse_mpi(data: Mapping[str, Any] | None, where: str = "mpi") -> MpiModel:
    """The ``[mpi]`` table (None: the hybrid model); UserError naming the first bad key."""
    if data is None:
        return MpiModel()
    _known(data, ("model", "family", "library", "paths"), where)
    model = data.get("model", "hybrid")
    if model not in MODELS:
        raise UserError(f"{where}.model: {message_value(str(model), quote=True)} is not "
                        f"allowed; allowed: {' | '.join(MODELS)}")
    if model == "hybrid":
        extra = next((k for k in ("family", "library", "paths") if k in data), None)
        if extra:
            raise UserError(f"{where}.{extra}: only with model = \"bind\"; allowed: no "
                            f"{extra} with the hybrid model (the image's own MPI)")
        return MpiModel()
    family = data.get("family")
    if family not in FAMILIES:
        raise UserError(f"{where}.family: {message_value(str(family), quote=True)} is not "
                        f"allowed; allowed: {' | '.join(FAMILIES)} (the host library's ABI: "
                        "mpich for Cray MPICH, MPICH, Intel MPI, MVAPICH)")
    if "library" not in data:
        raise UserError(f"{where}.library: missing; allowed: the host's libmpi the ranks load "
                        f"({SONAMES[family]} or a file behind that soname)")
    library = host_path(data["library"], f"{where}.library")
    paths = _paths(data.get("paths", []), f"{where}.paths", required=True)
    if posixpath.dirname(library) not in paths:
        raise UserError(f"{where}.library: {library} is in none of {where}.paths; allowed: a "
                        "library in one of the folders that are bound")
    return MpiModel(model, family, library, paths)


def _paths(raw: Any, where: str, required: bool = False) -> tuple[str, ...]:
    if not isinstance(raw, list) or (required and not raw):
        raise UserError(f"{where}: {message_value(str(raw), quote=True)} is not allowed; "
                        "allowed: a list of the host folders the library and what it needs "
                        "are in")
    return tuple(dict.fromkeys(host_path(p, f"{where}[{i}]") for i, p in enumerate(raw)))


def _known(data: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise UserError(f"{where}.{unknown[0]}: not a key of [{where}]; allowed: "
                        + ", ".join(keys))


@dataclass(frozen=True)
class Fabric:
    """``[fabric]``: what the job's network must be (None: not stated, not checked)."""

    kind: str | None = None  # "ofi" or "ucx"
    provider: str | None = None  # ofi: libfabric's provider
    paths: tuple[str, ...] = ()  # host folders of the provider's libraries

    def environment(self) -> tuple[tuple[str, str], ...]:
        return (("FI_PROVIDER", self.provider),) if self.provider else ()


FABRICS = ("ofi", "ucx")
_PROVIDER = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")


def parse_fabric(data: Mapping[str, Any] | None, where: str = "fabric") -> Fabric:
    if data is None:
        return Fabric()
    _known(data, ("kind", "provider", "paths"), where)
    kind = data.get("kind")
    if kind not in FABRICS:
        raise UserError(f"{where}.kind: {message_value(str(kind), quote=True)} is not allowed; "
                        f"allowed: {' | '.join(FABRICS)}")
    provider = data.get("provider")
    if kind == "ofi" and (not isinstance(provider, str) or not _PROVIDER.match(provider)):
        raise UserError(f"{where}.provider: {message_value(str(provider), quote=True)} is not "
                        "allowed; allowed: libfabric's provider name (cxi, efa, verbs, tcp)")
    if kind == "ucx" and provider is not None:
        raise UserError(f"{where}.provider: only with kind = \"ofi\"; allowed: no provider "
                        "with UCX")
    return Fabric(kind, provider, _paths(data.get("paths", []), f"{where}.paths"))


@dataclass(frozen=True)
class NcclNet:
    """``[nccl]``: the host's NCCL net plugin (aws-ofi-nccl or another) and the transport name
    NCCL must then use."""

    net_plugin: str | None = None
    net: str | None = None

    @property
    def paths(self) -> tuple[str, ...]:
        return (posixpath.dirname(self.net_plugin),) if self.net_plugin else ()

    def environment(self) -> tuple[tuple[str, str], ...]:
        if not self.net_plugin:
            return ()
        return (("NCCL_NET_PLUGIN", self.net_plugin), ("NCCL_NET", self.net or ""))


DEFAULT_NET = "AWS Libfabric"  # aws-ofi-nccl's name for its transport
_NET = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}\Z")


def parse_nccl(data: Mapping[str, Any] | None, where: str = "nccl") -> NcclNet:
    if data is None:
        return NcclNet()
    _known(data, ("net_plugin", "net"), where)
    if "net_plugin" not in data:
        raise UserError(f"{where}.net_plugin: missing; allowed: the host's plugin library "
                        "(libnccl-net.so or libnccl-net-NAME.so)")
    plugin = host_path(data["net_plugin"], f"{where}.net_plugin")
    net = data.get("net", DEFAULT_NET)
    if not isinstance(net, str) or not _NET.match(net):
        raise UserError(f"{where}.net: {message_value(str(net), quote=True)} is not allowed; "
                        "allowed: the plugin's transport name (NCCL_NET), e.g. \"AWS "
                        "Libfabric\"")
    return NcclNet(plugin, net)
