"""mpi4py built from source against the image's MPI (its ``mpicc``), never a bundled MPI.

Example::

    >>> print(build("4.1.2", "/usr/bin/mpicc").commands[0])
    MPICC=/usr/bin/mpicc pip install --no-cache-dir --no-binary=mpi4py mpi4py==4.1.2
"""

from __future__ import annotations

from containers.recipe import Run


def build(version: str, mpicc: str) -> Run:
    return Run((f"MPICC={mpicc} pip install --no-cache-dir --no-binary=mpi4py mpi4py=={version}",),
               comment="mpi4py from source, linked to this image's MPI", network=True)
