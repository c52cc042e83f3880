"""Debian's Open MPI (cpu flavour): its packages and the run-time defaults of a container.

Example::

    >>> BUILD_PACKAGES
    ['openmpi-bin', 'libopenmpi-dev']
    >>> dict(env().values)["OMPI_MCA_btl_vader_single_copy_mechanism"]
    'none'
"""

from __future__ import annotations

from containers.recipe import Env

BUILD_PACKAGES = ["openmpi-bin", "libopenmpi-dev"]
RUNTIME_PACKAGES = ["openmpi-bin"]
MPICC = "/usr/bin/mpicc"


def env() -> Env:
    # Containers usually lack CAP_SYS_PTRACE, which shared memory's CMA copy needs.
    return Env((("OMPI_MCA_btl_vader_single_copy_mechanism", "none"),), defaults=True)
