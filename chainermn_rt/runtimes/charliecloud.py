"""Runtime ``charliecloud``: each rank in ``ch-run --set-env`` of an image folder or SquashFS
(``make sqfs``), with the profile's binds (``-b``) and flags."""

from __future__ import annotations

import os

from chainermn_rt.elf import ElfError, glibc_of
from chainermn_rt.runtimes.base import Container, Runtime

# where a Debian, Ubuntu or RHEL image keeps its libc
LIBC = ("lib/x86_64-linux-gnu/libc.so.6", "lib/aarch64-linux-gnu/libc.so.6", "lib64/libc.so.6")


class Charliecloud(Runtime):
    name = "charliecloud"
    file_image = True
    install_image = ("dir", "a Charliecloud image folder (python -m containers.build chdir)")
    command = "ch-run"

    def image_glibc(self, image: str) -> tuple[int, int] | None:
        """An image folder's own libc (a SquashFS file: not read)."""
        for lib in LIBC:
            path = os.path.join(image, lib)
            if os.path.isfile(path):
                try:
                    return glibc_of(path)
                except ElfError:
                    return None
        return None

    def step(self, c: Container, image: str | None, exported: tuple[str, ...] = ()
             ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        argv = ["ch-run", "--set-env"]
        for b in c.binds:
            argv += ["-b", b]
        return (*argv, *c.flags, image or "", "--"), ()


RUNTIME = Charliecloud()
