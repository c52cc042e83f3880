"""The CUDA prefix of the build stage, from NVIDIA's PyPI wheels, with link-time stubs.

UCX's configure and link need CUDA's headers, ``libcudart`` and ``libcuda`` /
``libnvidia-ml``. The runtime, NVML and nvcc wheels' headers (nvcc's ``crt/`` is
included by ``cuda_runtime.h``) and ``libcudart`` are copied into ``/usr/local/cuda``
(``include``, ``lib64`` with the ``libcudart.so`` link); the two driver libraries exist
only as stubs in ``lib64/stubs``, generated from the headers: shared objects whose every
function (and every unversioned name a ``#define`` maps to a ``_vN`` one) returns an
error. They never reach the runtime
stage, where the host driver's libraries come in at run time (Apptainer ``--nv``,
enroot/pyxis, Charliecloud ``ch-fromhost --nvidia``). The gpu-upstream flavour's CUDA
devel image has all of this already.

Example::

    >>> b = wheels({"nvidia-cuda-runtime-cu12": "12.9.79", "nvidia-nvml-dev-cu12": "12.9.79",
    ...             "nvidia-cuda-nvcc-cu12": "12.9.86"})
    >>> print(b.build[0].commands[0].replace(" nvidia", "\\n  nvidia"))
    pip install --no-deps --target /tmp/cuda-wheels
      nvidia-cuda-runtime-cu12==12.9.79
      nvidia-nvml-dev-cu12==12.9.79
      nvidia-cuda-nvcc-cu12==12.9.86
    >>> b.runtime
    ()
"""

from __future__ import annotations

from containers.blocks.python_venv import PIP_CACHE
from containers.recipe import Block, Run

PREFIX = "/usr/local/cuda"
WHEELS = ("nvidia-cuda-runtime-cu12", "nvidia-nvml-dev-cu12", "nvidia-cuda-nvcc-cu12")
INCLUDES = ("cuda_runtime", "nvml_dev", "cuda_nvcc")  # their folders under nvidia/
STUBS = f"{PREFIX}/lib64/stubs"
STUB_BODY = "int \\1(void) { return 999; }"  # 999: CUDA_ERROR_UNKNOWN, NVML_ERROR_UNKNOWN


def _stub(lib: str, header: str, prefix: str) -> tuple[str, ...]:
    """Build ``lib`` (soname ``lib.1``) with every ``prefix*`` function of ``header``."""
    name = lib.removeprefix("lib")
    return (f"gcc -E -P -I{PREFIX}/include -o /tmp/stubs/{name}.i {PREFIX}/include/{header}",
            f"grep -oE '\\b{prefix}[A-Za-z0-9_]+ *\\(' /tmp/stubs/{name}.i > /tmp/stubs/{name}.f",
            f"sed -E 's/^([A-Za-z0-9_]+) *\\($/{STUB_BODY}/' /tmp/stubs/{name}.f "
            f"> /tmp/stubs/{name}.all",
            f"sed -nE 's/^[[:space:]]*#define +({prefix}[A-Za-z0-9_]+) +"
            f"{prefix}[A-Za-z0-9_]+_v[0-9]+[[:space:]]*$/{STUB_BODY}/p' "
            f"{PREFIX}/include/{header} >> /tmp/stubs/{name}.all",
            f"sort -u -o /tmp/stubs/{name}.c /tmp/stubs/{name}.all",
            f"gcc -shared -fPIC -Wl,-soname,{lib}.so.1 -o {STUBS}/{lib}.so /tmp/stubs/{name}.c")


def wheels(pins: dict[str, str]) -> Block:
    step = Run(("pip install --no-deps --target /tmp/cuda-wheels "
                + " ".join(f"{w}=={pins[w]}" for w in WHEELS),
                f"mkdir -p {PREFIX}/include {STUBS} /tmp/stubs",
                "cp -r " + " ".join(f"/tmp/cuda-wheels/nvidia/{d}/include/." for d in INCLUDES)
                + f" {PREFIX}/include/",
                f"cp -r /tmp/cuda-wheels/nvidia/cuda_runtime/lib/. {PREFIX}/lib64/",
                f"ln -s libcudart.so.12 {PREFIX}/lib64/libcudart.so",
                *_stub("libcuda", "cuda.h", "cu"),
                *_stub("libnvidia-ml", "nvml.h", "nvml"),
                "rm -rf /tmp/cuda-wheels /tmp/stubs"),
               comment=("CUDA headers and runtime from NVIDIA's wheels as the build's CUDA prefix;"
                        "\nlibcuda/libnvidia-ml link stubs (build stage only) from the headers"),
               network=True, cache=(PIP_CACHE,))
    return Block("cuda", build=(step,))
