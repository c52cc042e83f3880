"""Download a pinned source tarball, check its sha256, unpack it under /tmp/src.

Example::

    >>> for c in fetch("ucx", {"url": "https://x/ucx-1.tar.gz", "sha256": "ab"}): print(c)
    mkdir -p /tmp/src/ucx
    curl -fsSL -o /tmp/src/ucx.tar.gz https://x/ucx-1.tar.gz
    printf '%s  %s\\n' ab /tmp/src/ucx.tar.gz > /tmp/src/ucx.sha256
    sha256sum -c /tmp/src/ucx.sha256
    tar -xf /tmp/src/ucx.tar.gz -C /tmp/src/ucx --strip-components=1
"""

from __future__ import annotations

from containers.recipe import Run

# what fetch() needs in the build stage
BUILD_PACKAGES = ("curl", "bzip2", "ca-certificates")


def fetch(name: str, pin: dict) -> tuple[str, ...]:
    tarball = f"/tmp/src/{name}." + ("tar.bz2" if pin["url"].endswith(".bz2") else "tar.gz")
    return (
        f"mkdir -p /tmp/src/{name}",
        f"curl -fsSL -o {tarball} {pin['url']}",
        f"printf '%s  %s\\n' {pin['sha256']} {tarball} > /tmp/src/{name}.sha256",
        f"sha256sum -c /tmp/src/{name}.sha256",
        f"tar -xf {tarball} -C /tmp/src/{name} --strip-components=1",
    )


def cleanup(name: str) -> str:
    return f"rm -rf /tmp/src/{name} /tmp/src/{name}.*"


def configure_make(name: str, pin: dict, configure: str, comment: str) -> Run:
    """One step: fetch and check the tarball, ``configure && make install`` in it, clean up.

    >>> run = configure_make("x", {"url": "https://x/x.tar.gz", "sha256": "ab"},
    ...                      "./configure --prefix=/opt/x", "x 1")
    >>> run.commands[5:8]
    ('cd /tmp/src/x', './configure --prefix=/opt/x', 'make -j"$(nproc)" install')
    """
    return Run((*fetch(name, pin), f"cd /tmp/src/{name}", configure, 'make -j"$(nproc)" install',
                "cd /", cleanup(name)),
               comment=comment, network=True,
               ignore=(("DL3003", "configure and make run in the unpacked tree of this one step"),))
