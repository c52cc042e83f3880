"""The gpu-upstream flavour: NVIDIA's CUDA images and upstream releases, for a site with a registry.

CUDA devel image to build, CUDA runtime image to run; gdrcopy, UCX, PMIx and Open MPI
from pinned upstream tarballs (containers/versions.toml). Newer UCX and gdrcopy than
the gpu flavour; needs a registry that serves ``nvidia/cuda`` and the upstream sites.
Ubuntu's libjpeg-turbo for chainermn_rt's JPEG decoder.

Example::

    >>> from containers.versions import load
    >>> [s.base for s in recipe(load()).stages]
    ['nvidia/cuda:12.9.1-devel-ubuntu24.04', 'nvidia/cuda:12.9.1-runtime-ubuntu24.04']
"""

from __future__ import annotations

from containers import compose
from containers.blocks import (
    bundle,
    cupy,
    debian_source,
    gdrcopy,
    libjpeg_turbo,
    mpi4py,
    openmpi,
    pmix,
    python_venv,
    rdma_core,
    ucx,
)
from containers.recipe import Recipe
from containers.versions import pip_pin, python_pins

BASE = "cuda"
EXTRAS = ("gpu",)


def system_versions(v: dict) -> dict[str, str]:
    return {"cuda": v["cuda"]["version"], **{name: v[name]["version"] for name in
                                              ("gdrcopy", "ucx", "pmix", "openmpi")},
            "libjpeg-turbo": debian_source.upstream(v["cuda"]["libjpeg-turbo"])}


def recipe(v: dict) -> Recipe:
    prefix = v["image"]["prefix"]
    gpu_pins = python_pins(EXTRAS)
    wheel_pins = {k: p for k, p in gpu_pins.items() if k not in python_pins()}
    blocks = [python_venv.block(prefix, pip_pin()), rdma_core.block(),
              gdrcopy.block(v["gdrcopy"]), ucx.upstream(v["ucx"]), pmix.upstream(v["pmix"]),
              openmpi.upstream(v["openmpi"]),
              mpi4py.block(gpu_pins["mpi4py"]),
              cupy.block(wheel_pins, f"{prefix}/venv"),
              libjpeg_turbo.ubuntu(v["cuda"]["libjpeg-turbo"]),
              bundle.block(f"{prefix}/src", EXTRAS)]
    return Recipe("gpu-upstream", [
        compose.build_stage(v["cuda"]["devel"], blocks, comment=(
            "compilers, Python, rdma-core (verbs, rdmacm), PMIx's dependencies and "
            "libjpeg-turbo")),
        compose.runtime_stage(v["cuda"]["runtime"], blocks,
                              compose.final_steps("gpu-upstream", v, system_versions(v), EXTRAS),
                              comment="the run-time stack only: Python, rdma-core, PMIx's "
                                      "libraries, libjpeg-turbo"),
    ])
