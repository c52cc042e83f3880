"""Debian source packages, fetched by apt: the archive's signed Sources index vouches for them.

``apt-get source --download-only`` needs ``deb-src`` entries: they are derived from the
image's own ``deb`` entries (deb822 ``debian.sources`` or one-line ``sources.list``), so
the build uses whichever mirror its base image names. ``dpkg-source -x`` unpacks the
orig tarball and applies Debian's patches (the bare orig tarball of some packages, such
as UCX, has no ``configure``).

Example::

    >>> for c in fetch("ucx", "1.13.1-1")[2:]: print(c)
    apt-get update
    mkdir -p /tmp/src
    cd /tmp/src
    apt-get source --download-only ucx=1.13.1-1
    dpkg-source -x ucx_1.13.1-1.dsc /tmp/src/ucx
    rm -rf /var/lib/apt/lists/*
    >>> upstream("4.1.4-3"), upstream("1:2.1.5-2"), upstream("2.1.5-2ubuntu2")
    ('4.1.4', '2.1.5', '2.1.5')
"""

from __future__ import annotations

from containers.recipe import Run

BUILD_PACKAGES = ("dpkg-dev",)  # it depends on patch
# The repository's own fixes of source packages (containers/patches/), copied here at build time.
PATCHES = "containers/patches"
PATCH_DIR = "/usr/local/src/patches"
ENABLE_DEB_SRC = (
    "if [ -f /etc/apt/sources.list.d/debian.sources ]; then sed -i 's/^Types: deb$/Types: deb "
    "deb-src/' /etc/apt/sources.list.d/debian.sources; fi",
    "if [ -f /etc/apt/sources.list ]; then sed -n 's/^deb \\(.*\\)/deb-src \\1/p' "
    "/etc/apt/sources.list > /etc/apt/sources.list.d/deb-src.list; fi",
)


def upstream(version: str) -> str:
    """The upstream part of a Debian (or Ubuntu) version: no epoch, no revision."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def fetch(package: str, version: str) -> tuple[str, ...]:
    return (*ENABLE_DEB_SRC, "apt-get update", "mkdir -p /tmp/src", "cd /tmp/src",
            f"apt-get source --download-only {package}={version}",
            f"dpkg-source -x {package}_{version}.dsc /tmp/src/{package}",
            "rm -rf /var/lib/apt/lists/*")


def configure_make(package: str, version: str, configure: tuple[str, ...], comment: str,
                   patches: tuple[str, ...] = ()) -> Run:
    """One step: fetch and unpack the source package, apply ``patches`` (files in the image,
    ``-p1``, on top of Debian's own), configure, ``make install``, clean up."""
    return Run((*fetch(package, version), f"cd /tmp/src/{package}",
                *(f"patch -p1 -i {p}" for p in patches), *configure,
                'make -j"$(nproc)" install', "cd /", "rm -rf /tmp/src"),
               comment=comment,
               ignore=(("DL3003", "configure and make run in the unpacked tree of this one step"),))
