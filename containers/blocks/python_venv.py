"""The image's Python: the distribution's python3 with one venv under the image prefix.

Example::

    >>> b = block("/opt/x", "26.3")
    >>> b.build[0].commands
    ('python3 -m venv /opt/x/venv', '/opt/x/venv/bin/pip install pip==26.3')
    >>> b.path, dict(b.defaults)
    (('/opt/x/venv/bin',), {'PIP_NO_CACHE_DIR': '1'})
"""

from __future__ import annotations

from containers.recipe import Block, Copy, Run

BUILD_PACKAGES = ("python3", "python3-venv", "python3-dev", "build-essential", "ca-certificates")
RUNTIME_PACKAGES = ("python3",)
# pip's download cache: a BuildKit cache mount in the steps that install
PIP_CACHE = "/root/.cache/pip"


def block(prefix: str, pip: str) -> Block:
    """The venv with the project's pip (the distribution's is too old to build chainer)."""
    venv = f"{prefix}/venv"
    step = Run((f"python3 -m venv {venv}", f"{venv}/bin/pip install pip=={pip}"),
               network=True, cache=(PIP_CACHE,))
    return Block("python", build=(step,), runtime=(Copy(venv, venv, from_stage="build"),),
                 build_packages=BUILD_PACKAGES, runtime_packages=RUNTIME_PACKAGES,
                 path=(f"{venv}/bin",),
                 env=(("VIRTUAL_ENV", venv), ("PIP_DISABLE_PIP_VERSION_CHECK", "1")),
                 # builds keep pip's downloads in a cache mount; the image keeps none
                 defaults=(("PIP_NO_CACHE_DIR", "1"),))
