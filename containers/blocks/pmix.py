"""PMIx, so that Open MPI runs under ``srun --mpi=pmix``: Debian 12's, or a pinned tarball.

``debian`` (cpu and gpu flavours) is Debian's libpmix2, the one Debian's Slurm uses;
``upstream`` (gpu-upstream) builds a release under /opt/pmix.

Example::

    >>> debian().runtime_packages
    ('libpmix2',)
    >>> step = upstream({"version": "4.2.9", "url": "https://x/pmix.tar.bz2", "sha256": "ab"})
    >>> print(step.build[0].commands[6])
    ./configure --prefix=/opt/pmix --with-libevent=/usr --with-hwloc=/usr --disable-sphinx
"""

from __future__ import annotations

from containers.blocks import source
from containers.recipe import Block, Copy

PREFIX = "/opt/pmix"
# where Debian's libpmix-dev puts PMIx (its include/ and lib/)
DEBIAN_PREFIX = '/usr/lib/"$(dpkg-architecture -qDEB_HOST_MULTIARCH)"/pmix2'
EVENT_HWLOC_BUILD = ("libevent-dev", "libhwloc-dev", "zlib1g-dev")


def debian() -> Block:
    return Block("pmix", build_packages=("libpmix-dev", "dpkg-dev", *EVENT_HWLOC_BUILD),
                 runtime_packages=("libpmix2",))


def upstream(pin: dict) -> Block:
    step = source.configure_make(
        "pmix", pin,
        f"./configure --prefix={PREFIX} --with-libevent=/usr --with-hwloc=/usr --disable-sphinx",
        comment=f"PMIx {pin['version']}")
    return Block("pmix", build=(step,), runtime=(Copy(PREFIX, PREFIX, from_stage="build"),),
                 build_packages=source.BUILD_PACKAGES + EVENT_HWLOC_BUILD,
                 runtime_packages=("libevent-2.1-7t64", "libevent-core-2.1-7t64",
                                   "libevent-pthreads-2.1-7t64", "libhwloc15", "zlib1g"),
                 library_dirs=(f"{PREFIX}/lib",))
