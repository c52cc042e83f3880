"""mpi4py built from source against the image's MPI (its ``mpicc``), never a bundled MPI.

No pip cache here: a wheel built against one MPI must not be reused for another. ``CFLAGS``
(which replace Python's own) drop debug info: on 2 cores 128 s and 0.9 MB, against 212 s and
5.6 MB with ``-O3 -g`` (mpi4py 4.1.2, bench/RESULTS.md).

Example::

    >>> print(block("4.1.2", "/usr/bin/mpicc").build[0].commands[0])  # doctest: +ELLIPSIS
    MPICC=/usr/bin/mpicc CFLAGS='-O2 -g0 ...' pip install ... --no-binary=mpi4py mpi4py==4.1.2
"""

from __future__ import annotations

from containers.recipe import Block, Run

CFLAGS = "-O2 -g0 -fwrapv -DNDEBUG"


def block(version: str, mpicc: str) -> Block:
    step = Run((f"MPICC={mpicc} CFLAGS={CFLAGS!r} pip install --no-cache-dir --no-binary=mpi4py"
                f" mpi4py=={version}",),
               comment="mpi4py from source, linked to this image's MPI", network=True)
    return Block("mpi4py", build=(step,))
