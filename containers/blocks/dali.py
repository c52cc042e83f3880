"""NVIDIA DALI (GPU JPEG decoding for ``--decoder dali``, chainermn_rt/data/dali.py) from its
PyPI wheel, in the venv: the gpu-dali flavour only, as it adds about 1.1 GB (nvJPEG,
nvImageCodec, nvCOMP). The pins are pyproject's ``dali`` extra less the base dependencies the
bundle installs anyway; DALI finds its libraries by itself, the host driver's ``libcuda`` at
run time as CuPy does.

Example::

    >>> b = block({"nvidia-dali-cuda120": "2.4.0", "optree": "0.20.0"})
    >>> print(b.build[0].commands[0])
    pip install nvidia-dali-cuda120==2.4.0 optree==0.20.0
"""

from __future__ import annotations

from containers.blocks.python_venv import PIP_CACHE
from containers.recipe import Block, Run


def block(pins: dict[str, str]) -> Block:
    step = Run(("pip install " + " ".join(f"{name}=={pins[name]}" for name in sorted(pins)),),
               comment="NVIDIA DALI and what it needs (pyproject's dali extra)",
               network=True, cache=(PIP_CACHE,))
    return Block("dali", build=(step,))
