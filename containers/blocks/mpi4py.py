"""mpi4py: PyPI's binary wheel, which carries both MPI families' back-ends.

``mpi4py.MPI`` is ``MPI.mpich`` (links ``libmpi.so.12``: MPICH, Cray MPICH, Intel MPI) or
``MPI.openmpi`` (``libmpi.so.40``), chosen at import (mpi4py's ``_mpiabi.py``): by
``MPI4PY_MPIABI`` (``mpich``, ``openmpi``) when set, else by the family of the first libmpi that
loads: one already loaded (``LD_PRELOAD``), else ``MPI4PY_LIBMPI``'s paths, else the venv's
``lib`` and the linker's search for ``libmpi.so``, ``libmpi.so.12``, ``libmpi.so.40``. With no
variable set that is the image's own Open MPI (the hybrid model). The back-end then links its
library by soname, through the linker's search or a loaded library of that soname; so a site's
MPI bound in (the bind model) needs, set by the job:

- ``MPI4PY_MPIABI=mpich`` and a folder holding ``libmpi.so.12`` on ``LD_LIBRARY_PATH`` (any
  library: Debian's MPICH is ``libmpich.so.12``, a link of that name does); or
- ``MPI4PY_LIBMPI=PATH`` alone, for a library whose soname is ``libmpi.so.12``. With
  ``MPI4PY_MPIABI`` set, mpi4py does not read ``MPI4PY_LIBMPI``.

No variable is set here: Apptainer would let the image's value win over the job's.
The wheel replaces a build from source (128 s on 2 cores; bench/RESULTS.md).

Example::

    >>> print(block("4.1.2").build[0].commands[0])
    pip install --only-binary=mpi4py mpi4py==4.1.2
"""

from __future__ import annotations

from containers.blocks.python_venv import PIP_CACHE
from containers.recipe import Block, Run


def block(version: str) -> Block:
    step = Run((f"pip install --only-binary=mpi4py mpi4py=={version}",),
               comment="mpi4py's wheel: MPICH's and Open MPI's back-ends, one chosen at import",
               network=True, cache=(PIP_CACHE,))
    return Block("mpi4py", build=(step,))
