"""The cpu flavour: Debian 12, Debian's Open MPI and PMIx, mpi4py's wheel (both MPI families),
Debian's libfabric, and Debian's libjpeg-turbo for chainermn_rt's JPEG decoder.

Example::

    >>> from containers.versions import load
    >>> system_versions(load())["libfabric"], system_versions(load())["openmpi"]
    ('1.17.0', '4.1.4')
    >>> sorted(system_versions(load()))
    ['debian', 'libfabric', 'libjpeg-turbo', 'openmpi', 'pmix']
"""

from __future__ import annotations

from containers import compose
from containers.blocks import (
    bundle,
    debian_source,
    libfabric,
    libjpeg_turbo,
    mpi4py,
    openmpi,
    pmix,
    python_venv,
)
from containers.recipe import Recipe
from containers.versions import pip_pin, python_pins

BASE = "debian"
EXTRAS: tuple[str, ...] = ()


def system_versions(v: dict) -> dict[str, str]:
    d = v["debian"]
    return {"debian": d["suite"], "libfabric": debian_source.upstream(d["libfabric"]),
            "libjpeg-turbo": debian_source.upstream(d["libjpeg-turbo"]),
            "openmpi": debian_source.upstream(d["openmpi"]), "pmix": d["pmix"]}


def recipe(v: dict) -> Recipe:
    prefix = v["image"]["prefix"]
    blocks = [python_venv.block(prefix, pip_pin()), openmpi.binary(), pmix.debian(),
              mpi4py.block(python_pins()["mpi4py"]), libfabric.debian(v["debian"]["libfabric"]),
              libjpeg_turbo.debian(v["debian"]["libjpeg-turbo"]),
              bundle.block(f"{prefix}/src")]
    base = v["debian"]["base"]
    return Recipe("cpu", [
        compose.build_stage(base, blocks, comment=("compilers, Python, Debian's PMIx and "
                                                   "libjpeg-turbo for the build")),
        compose.runtime_stage(base, blocks, compose.final_steps("cpu", v, system_versions(v),
                                                                EXTRAS),
                              comment=("the run-time stack only: Python, Debian's Open MPI, "
                                       "libfabric, libjpeg-turbo")),
    ])
