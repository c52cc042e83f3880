"""The two flavours as recipes: ordered blocks put into a build stage and a slim runtime stage.

Example::

    >>> [s.name for s in recipe("cpu").stages]
    ['build', 'runtime']
"""

from __future__ import annotations

from containers.blocks import apt, chainermn_rt, metadata, mpi4py, openmpi_debian, python_venv, user
from containers.recipe import Recipe, Stage
from containers.stack import extras, labelled_python, system_versions
from containers.versions import load, package_version, pip_pin, python_pins

FLAVORS = ("cpu", "gpu")


def versions_file(flavor: str) -> str:
    return metadata.versions_file(flavor, package_version(), system_versions(flavor),
                                  python_pins(extras(flavor)))


def _cpu(v: dict) -> Recipe:
    prefix, src = v["image"]["prefix"], v["image"]["prefix"] + "/src"
    build = Stage("build", v["debian"]["base"], [
        apt.install(python_venv.BUILD_PACKAGES + openmpi_debian.BUILD_PACKAGES,
                    comment="compilers, Python and Debian's Open MPI for the build"),
        python_venv.env(prefix),
        *python_venv.build(prefix, pip_pin()),
        mpi4py.build(python_pins()["mpi4py"], openmpi_debian.MPICC),
        *chainermn_rt.sources(src),
        chainermn_rt.install(src),
    ])
    runtime = Stage("runtime", v["debian"]["base"], [
        apt.install(python_venv.RUNTIME_PACKAGES + openmpi_debian.RUNTIME_PACKAGES,
                    comment="the run-time stack only: Python and Debian's Open MPI"),
        *python_venv.runtime(prefix),
        metadata.copy_versions("cpu"),
        python_venv.env(prefix),
        openmpi_debian.env(),
        *user.runtime(v["image"]["user"], v["image"]["uid"]),
        metadata.labels("cpu", package_version(), system_versions("cpu", v),
                        labelled_python("cpu")),
    ])
    return Recipe("cpu", [build, runtime])


def recipe(flavor: str) -> Recipe:
    v = load()
    if flavor == "cpu":
        return _cpu(v).check()
    if flavor == "gpu":
        from containers.gpu import gpu_recipe

        return gpu_recipe(v).check()
    raise ValueError(f"flavor {flavor!r}; allowed: {', '.join(FLAVORS)}")
