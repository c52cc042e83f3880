"""The cpu flavour: Debian 12, Debian's Open MPI and PMIx, mpi4py built against them.

Example::

    >>> from containers.versions import load
    >>> system_versions(load())
    {'debian': 'bookworm', 'openmpi': '4.1.4', 'pmix': '4.2.2'}
"""

from __future__ import annotations

from containers import compose
from containers.blocks import bundle, debian_source, mpi4py, openmpi, pmix, python_venv
from containers.recipe import Recipe
from containers.versions import pip_pin, python_pins

BASE = "debian"
EXTRAS: tuple[str, ...] = ()


def system_versions(v: dict) -> dict[str, str]:
    d = v["debian"]
    return {"debian": d["suite"], "openmpi": debian_source.upstream(d["openmpi"]),
            "pmix": d["pmix"]}


def recipe(v: dict) -> Recipe:
    prefix = v["image"]["prefix"]
    blocks = [python_venv.block(prefix, pip_pin()), openmpi.binary(), pmix.debian(),
              mpi4py.block(python_pins()["mpi4py"], openmpi.DEBIAN_MPICC),
              bundle.block(f"{prefix}/src")]
    base = v["debian"]["base"]
    return Recipe("cpu", [
        compose.build_stage(base, blocks,
                            comment="compilers, Python and Debian's Open MPI for the build"),
        compose.runtime_stage(base, blocks, compose.final_steps("cpu", v, system_versions(v),
                                                                EXTRAS),
                              comment="the run-time stack only: Python and Debian's Open MPI"),
    ])
