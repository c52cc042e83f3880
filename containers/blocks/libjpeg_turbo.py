"""libjpeg-turbo, the library chainermn_rt's JPEG decoder (chainermn_rt/data/_jpeg.c) links.

Its headers go to the build stage, where the bundle's ``pip install`` compiles the
extension; its shared library to the runtime stage. Both are the distribution's packages at
the exact version containers/versions.toml pins (the build stage names the library too:
the headers' package depends on that same version). Debian 12 ships libjpeg62-turbo
(libjpeg 6.2's API, ``libjpeg.so.62``), Ubuntu 24.04 libjpeg-turbo8 (libjpeg 8's,
``libjpeg.so.8``); the decoder builds against either. When the suite replaces the version
(a security update), apt refuses the old pin: raise it in versions.toml. The doctor's
``jpeg`` check compares the extension's libjpeg-turbo with VERSIONS.

Example::

    >>> b = debian("1:2.1.5-2")
    >>> b.build_packages
    ('libjpeg62-turbo-dev=1:2.1.5-2', 'libjpeg62-turbo=1:2.1.5-2')
    >>> b.runtime_packages
    ('libjpeg62-turbo=1:2.1.5-2',)
    >>> ubuntu("2.1.5-2ubuntu2").runtime_packages
    ('libjpeg-turbo8=2.1.5-2ubuntu2',)
"""

from __future__ import annotations

from containers.recipe import Block


def _block(library: str, version: str) -> Block:
    return Block("libjpeg-turbo",
                 build_packages=(f"{library}-dev={version}", f"{library}={version}"),
                 runtime_packages=(f"{library}={version}",))


def debian(version: str) -> Block:
    """Debian's libjpeg62-turbo (cpu and gpu flavours)."""
    return _block("libjpeg62-turbo", version)


def ubuntu(version: str) -> Block:
    """Ubuntu's libjpeg-turbo8 (gpu-upstream: the CUDA images are Ubuntu 24.04)."""
    return _block("libjpeg-turbo8", version)
