"""The two flavours as recipes: ordered blocks put into a build stage and a slim runtime stage.

Example::

    >>> [s.name for s in recipe("cpu").stages]
    ['build', 'runtime']
"""

from __future__ import annotations

from containers.blocks import apt, chainermn_rt, metadata, mpi4py, openmpi_debian, python_venv, user
from containers.recipe import Recipe, Stage
from containers.versions import load, package_version, pip_pin, python_pins

FLAVORS = ("cpu", "gpu")
# The Python packages named in the images' labels (all pins are in VERSIONS).
LABELLED = ("chainer", "numpy", "mpi4py", "cupy-cuda12x", "nvidia-nccl-cu12", "nvidia-cudnn-cu12")


def system_versions(flavor: str, v: dict | None = None) -> dict[str, str]:
    """The non-Python stack of a flavour, as listed in labels and VERSIONS."""
    v = v or load()
    if flavor == "cpu":
        return {"debian": v["debian"]["suite"], "openmpi": v["debian"]["openmpi"]}
    return {"cuda": v["cuda"]["version"], **{name: v[name]["version"] for name in
                                              ("gdrcopy", "ucx", "pmix", "openmpi")}}


def labelled_python(flavor: str) -> dict[str, str]:
    pins = python_pins(extras(flavor))
    return {name: pins[name] for name in LABELLED if name in pins}


def extras(flavor: str) -> tuple[str, ...]:
    return () if flavor == "cpu" else ("gpu",)


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
