"""The gpu flavour (the default gpu image), built from what a site without a registry reaches.

Debian 12 as base; CUDA 12's runtime and libraries, cuDNN and NCCL from NVIDIA's PyPI
wheels (pyproject's ``gpu`` extra); UCX and Open MPI built CUDA-aware from Debian 12's
source packages (apt's signatures vouch for them) against Debian's PMIx, the one its
Slurm uses; mpi4py's wheel (both MPI families); Debian's libfabric for a site's OFI provider;
Debian's libjpeg-turbo for chainermn_rt's JPEG decoder. No gdrcopy: no reachable source
carries it.

Example::

    >>> from containers.versions import load
    >>> sorted(system_versions(load()))
    ['cuda', 'debian', 'libfabric', 'libjpeg-turbo', 'openmpi', 'pmix', 'ucx']
"""

from __future__ import annotations

from containers import compose
from containers.blocks import (
    bundle,
    cuda,
    cupy,
    debian_source,
    libfabric,
    libjpeg_turbo,
    mpi4py,
    openmpi,
    pmix,
    python_venv,
    rdma_core,
    ucx,
)
from containers.recipe import Block, Recipe
from containers.versions import pip_pin, python_pins

BASE = "debian"
EXTRAS = ("gpu",)


def system_versions(v: dict) -> dict[str, str]:
    d = v["debian"]
    return {"debian": d["suite"], "cuda": python_pins(EXTRAS)["nvidia-cuda-runtime-cu12"],
            "openmpi": debian_source.upstream(d["openmpi"]),
            "ucx": debian_source.upstream(d["ucx"]), "pmix": d["pmix"],
            "libfabric": debian_source.upstream(d["libfabric"]),
            "libjpeg-turbo": debian_source.upstream(d["libjpeg-turbo"])}


def recipe(v: dict, flavor: str = "gpu", extras: tuple[str, ...] = EXTRAS,
           added: tuple[Block, ...] = ()) -> Recipe:
    """The gpu image; ``added`` blocks go in before chainermn_rt, which installs ``extras``
    (the gpu-dali flavour: DALI's block and extra)."""
    prefix, d = v["image"]["prefix"], v["debian"]
    gpu_pins = python_pins(EXTRAS)
    wheel_pins = {k: p for k, p in gpu_pins.items() if k not in python_pins()}
    blocks = [python_venv.block(prefix, pip_pin()),
              cuda.wheels(python_pins(("gpu", "gpu-build"))),
              rdma_core.block(), pmix.debian(), ucx.debian(d["ucx"]),
              openmpi.debian(d["openmpi"]),
              mpi4py.block(gpu_pins["mpi4py"]),
              cupy.block(wheel_pins, f"{prefix}/venv"),
              libfabric.debian(d["libfabric"]),
              libjpeg_turbo.debian(d["libjpeg-turbo"]),
              *added,
              bundle.block(f"{prefix}/src", extras)]
    base = d["base"]
    return Recipe(flavor, [
        compose.build_stage(base, blocks, comment=(
            "compilers, Python, rdma-core (verbs, rdmacm), Debian's PMIx, libevent, hwloc and"
            "\nlibjpeg-turbo, and what unpacking and building Debian's source packages needs")),
        compose.runtime_stage(base, blocks, compose.final_steps(flavor, v, system_versions(v),
                                                                extras),
                              comment="the run-time stack only: Python, rdma-core, PMIx, NUMA, "
                                      "libfabric, libjpeg-turbo"),
    ])
