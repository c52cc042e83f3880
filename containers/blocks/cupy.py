"""CuPy 13, cuDNN 8.9, NCCL and CUDA's libraries from their PyPI wheels, in the venv.

The pins are pyproject's ``gpu`` extra. CuPy finds cuDNN, NCCL and CUDA's headers in
the wheels by itself; cuBLAS, cuRAND, cuSOLVER, cuSPARSE, cuFFT and NVRTC it loads
by name, so the wheels' ``lib`` folders go to the runtime's dynamic linker. Files of
the wheels that nothing loads are removed (``UNUSED``, about 300 MB).

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

# Files of the wheels nothing here loads: NVRTC's alternative build, the multi-GPU
# cuSOLVER (CuPy binds cusolverDn/Sp) and NCCL's device-side bitcode for user kernels.
UNUSED = ("cuda_nvrtc/lib/libnvrtc.alt.so.*", "cusolver/lib/libcusolverMg.so.*",
          "nccl/lib/libnccl_device.*")


def block(pins: dict[str, str], venv: str) -> Block:
    nvidia = f"{venv}/lib/python3*/site-packages/nvidia"
    step = Run(("pip install " + " ".join(f"{name}=={pins[name]}" for name in sorted(pins)),
                "rm -f " + " ".join(f"{nvidia}/{path}" for path in UNUSED)),
               comment="CuPy and the CUDA, cuDNN and NCCL wheels (pyproject's gpu extra)",
               network=True, cache=(PIP_CACHE,))
    return Block("cupy", build=(step,), library_dirs=(f"{nvidia}/*/lib",))
