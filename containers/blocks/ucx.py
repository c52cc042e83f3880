"""UCX with its CUDA transport, verbs and rdmacm: Debian 12's source package, or upstream's.

``debian`` (the gpu flavour) builds Debian's signed source package; ``upstream`` (the
gpu-upstream flavour) a pinned release tarball, with gdrcopy. Both link the CUDA
module against the build stage's libcuda/libnvidia-ml stubs; at run time the host
driver's libraries are used.

Example::

    >>> b = debian("1.13.1-1")
    >>> print(b.build[0].commands[-4].replace(" --", "\\n  --"))
    ./contrib/configure-release
      --prefix=/opt/ucx
      --with-cuda=/usr/local/cuda
      --with-verbs
      --with-rdmacm
      --without-gdrcopy
      --enable-mt
      --without-java
      --without-go
      --disable-doxygen-doc LDFLAGS=-L/usr/local/cuda/lib64/stubs
    >>> b.library_dirs, b.path, b.defaults
    (('/opt/ucx/lib',), ('/opt/ucx/bin',), (('UCX_TLS', '^cma'),))
"""

from __future__ import annotations

from containers.blocks import debian_source, gdrcopy, source
from containers.recipe import Block, Copy

PREFIX = "/opt/ucx"
BUILD_PACKAGES = ("libnuma-dev",)
RUNTIME_PACKAGES = ("libnuma1",)
AUTOTOOLS = ("autoconf", "automake", "libtool", "pkg-config")
# Containers usually may not ptrace their neighbours (no CAP_SYS_PTRACE; Yama under ch-run and
# Apptainer), which UCX's CMA copies need: it aborts on the first large message. Shared memory
# (posix, sysv) carries node-local traffic instead; a caller's UCX_TLS wins.
DEFAULTS = (("UCX_TLS", "^cma"),)


def _configure(cuda: str, gdr: str) -> str:
    return (f"./contrib/configure-release --prefix={PREFIX} --with-cuda={cuda} --with-verbs"
            f" --with-rdmacm {gdr} --enable-mt --without-java --without-go"
            " --disable-doxygen-doc"
            # link against the build stage's libcuda stub; the host driver's is used at run time
            f" LDFLAGS=-L{cuda}/lib64/stubs")


def _block(build, packages=()) -> Block:
    return Block("ucx", build=(build,), runtime=(Copy(PREFIX, PREFIX, from_stage="build"),),
                 build_packages=BUILD_PACKAGES + packages, runtime_packages=RUNTIME_PACKAGES,
                 path=(f"{PREFIX}/bin",), library_dirs=(f"{PREFIX}/lib",), defaults=DEFAULTS)


def debian(version: str, cuda: str = "/usr/local/cuda") -> Block:
    step = debian_source.configure_make(
        "ucx", version, ("./autogen.sh", _configure(cuda, "--without-gdrcopy")),
        comment=f"UCX {version} (Debian 12's source) with CUDA, verbs and rdmacm")
    return _block(step, debian_source.BUILD_PACKAGES + AUTOTOOLS)


def upstream(pin: dict, cuda: str = "/usr/local/cuda") -> Block:
    step = source.configure_make(
        "ucx", pin, _configure(cuda, f"--with-gdrcopy={gdrcopy.PREFIX}"),
        comment=f"UCX {pin['version']} with CUDA, verbs, rdmacm and gdrcopy")
    return _block(step, source.BUILD_PACKAGES)
