"""gdrcopy's user-space library (the kernel module belongs to the host), from a pinned tarball.

Only the gpu-upstream flavour has it: no reachable source carries it here.

Example::

    >>> b = block({"version": "2.4.4", "url": "https://x/v2.4.4.tar.gz", "sha256": "ab"})
    >>> print(b.build[0].commands[-2])
    make -C /tmp/src/gdrcopy prefix=/opt/gdrcopy CUDA=/usr/local/cuda lib lib_install
"""

from __future__ import annotations

from containers.blocks import source
from containers.recipe import Block, Copy, Run

PREFIX = "/opt/gdrcopy"


def block(pin: dict, cuda: str = "/usr/local/cuda") -> Block:
    step = Run((*source.fetch("gdrcopy", pin),
                f"make -C /tmp/src/gdrcopy prefix={PREFIX} CUDA={cuda} lib lib_install",
                source.cleanup("gdrcopy")),
               comment=f"gdrcopy {pin['version']} (library only)", network=True)
    return Block("gdrcopy", build=(step,), runtime=(Copy(PREFIX, PREFIX, from_stage="build"),),
                 build_packages=source.BUILD_PACKAGES,
                 library_dirs=(f"{PREFIX}/lib",))
