"""Which MPI the ranks use: the image's own (``hybrid``, the default: its Open MPI talks to the
host Slurm's PMIx) or the host's, bound into the container (``bind``: Cray MPICH on Slingshot,
a site's MPICH, Intel MPI, MVAPICH, or its Open MPI), from the profile's ``[mpi]`` table::

    [mpi]
    model = "bind"
    family = "mpich"       # the library's ABI: mpich (libmpi.so.12) or openmpi (libmpi.so.40)
    library = "/opt/cray/pe/mpich/8.1.28/ofi/gnu/12.3/lib/libmpi_gnu_123.so.12"
    paths = ["/opt/cray/pe/mpich/8.1.28/ofi/gnu/12.3/lib", "/opt/cray/libfabric/1.20.1/lib64"]

The Plan binds every folder of ``paths`` at the same path (through the runtime's own
mechanism) and sets :data:`VARIABLES`: mpi4py's ``MPI4PY_MPIABI`` and ``MPI4PY_LIBMPI`` choose
the library, and the rank step puts ``paths`` first on ``LD_LIBRARY_PATH`` (inside the
container, before the command starts: the image's own path is kept). A family needs the srun
plugin that serves its PMI (:data:`PMI`): MPICH speaks PMI-1/PMI-2, and under ``--mpi=pmix``
its ranks start as N one-rank worlds; Open MPI 5 speaks PMIx only.

>>> model = parse({"model": "bind", "family": "mpich", "library": "/h/lib/libmpi.so.12",
...                "paths": ["/h/lib"]}, "mpi")
>>> dict(model.environment())["MPI4PY_MPIABI"], model.binds
('mpich', ('/h/lib',))
>>> parse({"family": "mpich"}, "mpi")  # doctest: +ELLIPSIS
Traceback (most recent call last):
chainermn_rt.errors.UserError: mpi.family: only with model = "bind"; allowed: ...
"""

from __future__ import annotations

import os
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
# the rank step puts these folders first on LD_LIBRARY_PATH (rank_contract's name)
PATH_VAR = "CHAINERMN_RT_MPI_PATH"
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

    @property
    def binds(self) -> tuple[str, ...]:
        """The host folders a container must show at the same paths."""
        return self.paths if self.bound else ()

    def environment(self) -> tuple[tuple[str, str], ...]:
        """The job's variables that choose the library (none for the hybrid model)."""
        if not self.bound:
            return ()
        return (("MPI4PY_MPIABI", self.family), ("MPI4PY_LIBMPI", self.library),
                (PATH_VAR, ":".join(self.paths)))

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


def _path(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _PATH.match(value) or not value.isprintable():
        shown = message_value(str(value), quote=True)
        raise UserError(f"{where}: {shown} is not allowed; allowed: {PATH_ALLOWED}")
    return posixpath.normpath(value)


def parse(data: Mapping[str, Any] | None, where: str = "mpi") -> MpiModel:
    """The ``[mpi]`` table (None: the hybrid model); UserError naming the first bad key."""
    if data is None:
        return MpiModel()
    unknown = sorted(set(data) - {"model", "family", "library", "paths"})
    if unknown:
        raise UserError(f"{where}.{unknown[0]}: not a key of [{where}]; allowed: model, family, "
                        "library, paths")
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
    library = _path(data["library"], f"{where}.library")
    raw = data.get("paths", [])
    if not isinstance(raw, list) or not raw:
        raise UserError(f"{where}.paths: {message_value(str(raw), quote=True)} is not allowed; "
                        "allowed: a list of the host folders the library and what it needs "
                        "are in")
    paths = tuple(dict.fromkeys(_path(p, f"{where}.paths[{i}]") for i, p in enumerate(raw)))
    if posixpath.dirname(library) not in paths:
        raise UserError(f"{where}.library: {library} is in none of {where}.paths; allowed: a "
                        "library in one of the folders that are bound")
    return MpiModel(model, family, library, paths)


def library_path(environ: Mapping[str, str]) -> str | None:
    """The rank step's LD_LIBRARY_PATH: :data:`PATH_VAR`'s folders first, then what the image
    had; None when the job binds no MPI.

    >>> library_path({PATH_VAR: "/h/lib", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"})
    '/h/lib:/usr/local/cuda/lib64'
    """
    first = environ.get(PATH_VAR)
    if not first:
        return None
    rest = [p for p in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([*first.split(os.pathsep), *rest]))
