"""mpi4py built from source against the image's MPI (its ``mpicc``), never a bundled MPI.

No pip cache here: a wheel built against one MPI must not be reused for another.

Example::

    >>> print(block("4.1.2", "/usr/bin/mpicc").build[0].commands[0])
    MPICC=/usr/bin/mpicc pip install --no-cache-dir --no-binary=mpi4py mpi4py==4.1.2
"""

from __future__ import annotations

from containers.recipe import Block, Run


def block(version: str, mpicc: str) -> Block:
    step = Run((f"MPICC={mpicc} pip install --no-cache-dir --no-binary=mpi4py mpi4py=={version}",),
               comment="mpi4py from source, linked to this image's MPI", network=True)
    return Block("mpi4py", build=(step,))
