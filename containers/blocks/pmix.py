"""OpenPMIx, so that Open MPI runs under ``srun --mpi=pmix``; from a pinned tarball.

Example::

    >>> step = build({"version": "4.2.9", "url": "https://x/pmix.tar.bz2", "sha256": "ab"})
    >>> print(step.commands[6])
    ./configure --prefix=/opt/pmix --with-libevent=/usr --with-hwloc=/usr --disable-sphinx
"""

from __future__ import annotations

from containers.blocks import source
from containers.recipe import Copy, Run

PREFIX = "/opt/pmix"
BUILD_PACKAGES = ["libevent-dev", "libhwloc-dev", "zlib1g-dev"]
RUNTIME_PACKAGES = ["libevent-2.1-7t64", "libevent-core-2.1-7t64", "libevent-pthreads-2.1-7t64",
                    "libhwloc15", "zlib1g"]


def build(pin: dict) -> Run:
    return source.configure_make(
        "pmix", pin,
        f"./configure --prefix={PREFIX} --with-libevent=/usr --with-hwloc=/usr --disable-sphinx",
        comment=f"PMIx {pin['version']}")


def runtime() -> list:
    return [Copy(PREFIX, PREFIX, from_stage="build")]
