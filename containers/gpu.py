"""The gpu flavour: CUDA devel image to build, CUDA runtime image to run.

Example::

    >>> from containers.versions import load
    >>> [s.base for s in gpu_recipe(load()).stages]
    ['nvidia/cuda:12.6.3-devel-ubuntu24.04', 'nvidia/cuda:12.6.3-runtime-ubuntu24.04']
"""

from __future__ import annotations

from containers.blocks import (
    apt,
    chainermn_rt,
    cupy,
    gdrcopy,
    metadata,
    mpi4py,
    openmpi,
    pmix,
    python_venv,
    rdma_core,
    ucx,
    user,
)
from containers.recipe import Recipe, Stage
from containers.stack import labelled_python, system_versions
from containers.versions import package_version, pip_pin, python_pins

DOWNLOAD_PACKAGES = ["curl", "bzip2", "ca-certificates"]


def gpu_recipe(v: dict) -> Recipe:

    prefix, src = v["image"]["prefix"], v["image"]["prefix"] + "/src"
    venv = f"{prefix}/venv"
    mpi_path = f"{openmpi.PREFIX}/bin"
    build = Stage("build", v["cuda"]["devel"], [
        apt.install(python_venv.BUILD_PACKAGES + rdma_core.BUILD_PACKAGES + pmix.BUILD_PACKAGES
                    + DOWNLOAD_PACKAGES,
                    comment="compilers, Python, rdma-core (verbs, rdmacm) and PMIx's dependencies"),
        gdrcopy.build(v["gdrcopy"]),
        ucx.build(v["ucx"]),
        pmix.build(v["pmix"]),
        openmpi.build(v["openmpi"]),
        python_venv.env(prefix, path_before=mpi_path),
        cupy.env(venv, v["cuda"]["python"], openmpi.library_path()),
        *python_venv.build(prefix, pip_pin()),
        mpi4py.build(python_pins()["mpi4py"], openmpi.MPICC),
        *chainermn_rt.sources(src),
        chainermn_rt.install(src, ("gpu",)),
    ])
    runtime = Stage("runtime", v["cuda"]["runtime"], [
        apt.install(python_venv.RUNTIME_PACKAGES + rdma_core.RUNTIME_PACKAGES
                    + pmix.RUNTIME_PACKAGES,
                    comment="the run-time stack only: Python, rdma-core, PMIx's libraries"),
        *gdrcopy.runtime(), *ucx.runtime(), *pmix.runtime(), *openmpi.runtime(),
        *python_venv.runtime(prefix),
        metadata.copy_versions("gpu"),
        python_venv.env(prefix, path_before=mpi_path),
        cupy.env(venv, v["cuda"]["python"], openmpi.library_path()),
        openmpi.env(),
        *user.runtime(v["image"]["user"], v["image"]["uid"]),
        metadata.labels("gpu", package_version(), system_versions("gpu", v),
                        labelled_python("gpu")),
    ])
    return Recipe("gpu", [build, runtime])
