"""Which MPI a rank really runs, as one JSON line (tests/test_jobs_debian13.py): the world mpi4py
sees, the MPI library's own version, the libmpi and PMIx client files mapped into this process
with the PMIx client's version (``PMIx_Get_version``), the PMIx server's version (the variable
Slurm's PMIx plugin sets), the OS the rank sees and its Python. Ends with a Barrier."""

import ctypes
import json
import os
import platform
import socket
import sys

from mpi4py import MPI


def mapped(name: str) -> str | None:
    """The file of the shared library ``name`` (``libmpi.so``) this process has mapped."""
    with open("/proc/self/maps") as f:
        return next((line.split()[-1] for line in f if f"/{name}" in line), None)


def pmix_client(path: str | None) -> str | None:
    if path is None:
        return None
    get = ctypes.CDLL(path).PMIx_Get_version
    get.restype = ctypes.c_char_p
    return get().decode()


comm = MPI.COMM_WORLD
pmix = mapped("libpmix.so")
print(json.dumps({
    "rank": comm.rank, "size": comm.size, "host": socket.gethostname(),
    "mpi": MPI.Get_library_version().splitlines()[0].split(",")[0].strip(),
    "libmpi": mapped("libmpi.so") or mapped("libmpich.so"),
    "pmix_client": pmix_client(pmix), "pmix_server": os.environ.get("PMIX_VERSION"),
    "os": platform.freedesktop_os_release().get("PRETTY_NAME"), "uid": os.getuid(),
    "python": sys.executable,
}), flush=True)
comm.Barrier()
