"""CuPy 13 with cuDNN 8.9 and NCCL from their PyPI wheels (pins in pyproject's ``gpu`` extra).

The wheels put libcudnn.so.8 and libnccl.so.2 inside the venv; CuPy 13 finds them
through LD_LIBRARY_PATH.

Example::

    >>> print(dict(env("/opt/x/venv", "3.12").values)["LD_LIBRARY_PATH"].split(":")[0])
    /opt/x/venv/lib/python3.12/site-packages/nvidia/cudnn/lib
"""

from __future__ import annotations

from containers.recipe import Env

WHEEL_LIBS = ("cudnn", "nccl")


def env(venv: str, python: str, before: str = "") -> Env:
    site = f"{venv}/lib/python{python}/site-packages/nvidia"
    libs = [f"{site}/{name}/lib" for name in WHEEL_LIBS] + ([before] if before else [])
    return Env((("LD_LIBRARY_PATH", ":".join(libs)),))
