"""The gpu-dali flavour: the gpu image and NVIDIA DALI (pyproject's ``dali`` extra), for
``--decoder dali`` (GPU JPEG decoding, chainermn_rt/data/dali.py). Opt-in
(``make image FLAVOR=gpu-dali``): DALI adds about 1.1 GB to the gpu image.

Example::

    >>> from containers.versions import load
    >>> system_versions(load()) == gpu.system_versions(load())
    True
"""

from __future__ import annotations

from containers.blocks import dali
from containers.flavors import gpu
from containers.recipe import Recipe
from containers.versions import python_pins

BASE = gpu.BASE
EXTRAS = ("gpu", "dali")
system_versions = gpu.system_versions


def recipe(v: dict) -> Recipe:
    pins = {k: p for k, p in python_pins(("dali",)).items() if k not in python_pins()}
    return gpu.recipe(v, "gpu-dali", EXTRAS, (dali.block(pins),))
