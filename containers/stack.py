"""What an image's labels and VERSIONS file name per flavour (below flavors.py and gpu.py)."""

from __future__ import annotations

from containers.versions import load, python_pins

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
