"""CuPy 13, cuDNN 8.9, NCCL and CUDA's libraries from their PyPI wheels, in the venv.

The pins are pyproject's ``gpu`` extra. CuPy finds cuDNN, NCCL and CUDA's headers in
the wheels by itself; cuBLAS, cuRAND, cuSOLVER, cuSPARSE, cuFFT and NVRTC it loads
by name, so the wheels' ``lib`` folders go to the runtime's dynamic linker.

Example::

    >>> b = block({"cupy-cuda12x": "13.6.0"}, "/opt/x/venv")
    >>> print(b.build[0].commands[0])
    pip install cupy-cuda12x==13.6.0
    >>> b.library_dirs
    ('/opt/x/venv/lib/python3*/site-packages/nvidia/*/lib',)
"""

from __future__ import annotations

from containers.blocks.python_venv import PIP_CACHE
from containers.recipe import Block, Run


def block(pins: dict[str, str], venv: str) -> Block:
    step = Run(("pip install " + " ".join(f"{name}=={pins[name]}" for name in sorted(pins)),),
               comment="CuPy and the CUDA, cuDNN and NCCL wheels (pyproject's gpu extra)",
               network=True, cache=(PIP_CACHE,))
    return Block("cupy", build=(step,),
                 library_dirs=(f"{venv}/lib/python3*/site-packages/nvidia/*/lib",))
