"""gdrcopy's user-space library (the kernel module belongs to the host), from a pinned tarball.

Example::

    >>> step = build({"version": "2.4.4", "url": "https://x/v2.4.4.tar.gz", "sha256": "ab"})
    >>> print(step.commands[-2])
    make -C /tmp/src/gdrcopy prefix=/opt/gdrcopy CUDA=/usr/local/cuda lib lib_install
"""

from __future__ import annotations

from containers.blocks import source
from containers.recipe import Copy, Run

PREFIX = "/opt/gdrcopy"


def build(pin: dict, cuda: str = "/usr/local/cuda") -> Run:
    return Run((*source.fetch("gdrcopy", pin),
                f"make -C /tmp/src/gdrcopy prefix={PREFIX} CUDA={cuda} lib lib_install",
                source.cleanup("gdrcopy")),
               comment=f"gdrcopy {pin['version']} (library only)", network=True)


def runtime() -> list:
    return [Copy(PREFIX, PREFIX, from_stage="build")]
