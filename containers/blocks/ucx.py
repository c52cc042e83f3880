"""UCX with CUDA, verbs, rdmacm and gdrcopy, from a pinned tarball.

Example::

    >>> step = build({"version": "1.18.1", "url": "https://x/ucx.tar.gz", "sha256": "ab"})
    >>> print(step.commands[5])
    cd /tmp/src/ucx
    >>> "--with-gdrcopy=/opt/gdrcopy" in step.commands[6]
    True
"""

from __future__ import annotations

from containers.blocks import gdrcopy, source
from containers.recipe import Copy, Run

PREFIX = "/opt/ucx"


def build(pin: dict, cuda: str = "/usr/local/cuda") -> Run:
    return source.configure_make(
        "ucx", pin,
        (f"./contrib/configure-release --prefix={PREFIX} --with-cuda={cuda} --with-verbs"
         f" --with-rdmacm --with-gdrcopy={gdrcopy.PREFIX} --enable-mt --without-java"
         " --disable-doxygen-doc --disable-logging"
         # link against the devel image's libcuda stub; the host driver's is used at run time
         f" LDFLAGS=-L{cuda}/lib64/stubs"),
        comment=f"UCX {pin['version']} with CUDA, verbs, rdmacm and gdrcopy")


def runtime() -> list:
    return [Copy(PREFIX, PREFIX, from_stage="build")]
