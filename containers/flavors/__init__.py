"""The flavours, one module each: which blocks, in which order, in which stage.

- ``cpu``: Debian 12 with Debian's Open MPI.
- ``gpu`` (the default gpu image): Debian 12; CUDA, cuDNN and NCCL from NVIDIA's PyPI
  wheels; UCX and Open MPI built CUDA-aware from Debian 12's signed source packages.
- ``gpu-upstream``: NVIDIA's CUDA images and upstream UCX, PMIx, Open MPI and gdrcopy
  tarballs, for a site whose registry serves the CUDA images.
- ``gpu-dali``: the gpu image and NVIDIA DALI (GPU JPEG decoding; opt-in: about 1.1 GB more).

Example::

    >>> [s.name for s in recipe("cpu").stages]
    ['build', 'runtime']
    >>> FLAVORS
    ('cpu', 'gpu', 'gpu-upstream', 'gpu-dali')
"""

from __future__ import annotations

import importlib
from types import ModuleType

from chainermn_rt.install.layout import FLAVORS  # the one list: `install --flavor` checks it
from containers.blocks import metadata
from containers.recipe import Recipe
from containers.versions import load, package_version, python_pins

# flavour "a-b" is module containers.flavors.a_b
MODULES: dict[str, ModuleType] = {
    name: importlib.import_module(f"{__package__}.{name.replace('-', '_')}") for name in FLAVORS}


def module(flavor: str) -> ModuleType:
    if flavor not in MODULES:
        raise ValueError(f"flavor {flavor!r}; allowed: {', '.join(FLAVORS)}")
    return MODULES[flavor]


def recipe(flavor: str) -> Recipe:
    return module(flavor).recipe(load()).check()


def system_versions(flavor: str) -> dict[str, str]:
    """The non-Python stack of a flavour, as its labels and VERSIONS list it."""
    return module(flavor).system_versions(load())


def versions_file(flavor: str) -> str:
    return metadata.versions_file(flavor, package_version(), system_versions(flavor),
                                  python_pins(module(flavor).EXTRAS))


def debian_based(flavor: str) -> bool:
    """True when both stages build FROM the Debian base (``make base`` can stand in for it)."""
    return module(flavor).BASE == "debian"
