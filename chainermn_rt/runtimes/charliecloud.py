"""Runtime ``charliecloud``: each rank in ``ch-run --set-env`` of an image folder or SquashFS
(``make sqfs``), with the profile's binds (``-b``) and flags."""

from __future__ import annotations

from chainermn_rt.runtimes.base import Container, Runtime


class Charliecloud(Runtime):
    name = "charliecloud"
    file_image = True
    install_image = ("dir", "a Charliecloud image folder (python -m containers.build chdir)")
    command = "ch-run"

    def step(self, c: Container, image: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        argv = ["ch-run", "--set-env"]
        for b in c.binds:
            argv += ["-b", b]
        return (*argv, *c.flags, image or "", "--"), ()


RUNTIME = Charliecloud()
