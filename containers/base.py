"""Make the Debian base image without a registry: debootstrap from the host's own apt mirror.

The mirror is read from the build host's apt configuration (deb822 files in
/etc/apt/sources.list.d/ first, then /etc/apt/sources.list), so no mirror host
is written in the repository.

Example::

    python -m containers.base                 # -> image chainermn-rt/base:bookworm in build/docker
    python -m containers.base --print-mirror  # the URI apt uses, e.g. http://MIRROR/debian
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from chainermn_rt.sandbox.debian import find_mirror
from containers.dockerd import Dockerd
from containers.versions import load

APT = Path("/etc/apt")


def mirror_from_apt(apt: Path = APT, suite: str = "bookworm") -> str:
    """The first ``deb`` URI that serves ``suite`` in apt's sources (deb822 or one-line form):
    chainermn_rt.sandbox.debian.find_mirror, which the sandbox's Debian 13 root uses too."""
    found = find_mirror(apt, suite)
    if found is None:
        raise RuntimeError(f"no 'deb' source for {suite} in {apt}/sources.list(.d): cannot "
                           "debootstrap")
    return found


def make_base(image: str, suite: str, engine: Dockerd) -> None:
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is missing: install it (`make apt`)")
    mirror = mirror_from_apt(suite=suite)
    with tempfile.TemporaryDirectory(prefix="chainermn-rt-base-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        subprocess.run(["debootstrap", "--variant=minbase", suite, str(rootfs), mirror], check=True,
                       stdout=subprocess.DEVNULL)
        # apt caches stay out of the image
        subprocess.run(["rm", "-rf", str(rootfs / "var/cache/apt/archives"),
                        str(rootfs / "var/lib/apt/lists")], check=True)
        (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True)
        (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run([engine.docker, "import", "-", image], stdin=tar.stdout, check=True,
                       env=engine.env(), stdout=subprocess.DEVNULL)
        tar.stdout.close()
        if tar.wait() != 0:
            raise RuntimeError("tar of the debootstrapped root failed")


def main(argv: list[str] | None = None) -> int:
    debian = load()["debian"]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=debian["local_base"])
    parser.add_argument("--print-mirror", action="store_true")
    args = parser.parse_args(argv)
    if args.print_mirror:
        print(mirror_from_apt(suite=debian["suite"]))
        return 0
    with Dockerd() as engine:
        make_base(args.image, debian["suite"], engine)
    print(args.image)
    return 0


if __name__ == "__main__":
    sys.exit(main())
