"""Runtime ``pyxis``: NVIDIA's Slurm plugin over enroot. The container is a property of the
srun step (``--container-image``, ``--container-mounts``), not a command: the install has no
``python3`` wrapper, and ``mpirun`` cannot start such ranks (the Plan refuses it).

>>> from chainermn_rt.runtimes.base import Container
>>> RUNTIME.step(Container(binds=("/data", "/s:/s:ro")), "/i/x.sqsh")
((), ('--container-image=/i/x.sqsh', '--container-mounts=/data,/s:/s:ro'))
"""

from __future__ import annotations

from chainermn_rt.runtimes.base import Container, Runtime


class Pyxis(Runtime):
    name = "pyxis"
    file_image = True  # a SquashFS file (make sqfs), or a registry's reference
    install_image = (".sqsh", "a squashfs file ending in .sqsh (make sqfs)")
    launchers = ("srun",)
    command = "enroot"  # on every node: pyxis calls it
    srun_option = "--container-image"

    def step(self, c: Container, image: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        flags = [f"--container-image={image}"]
        if c.binds:
            flags.append("--container-mounts=" + ",".join(c.binds))
        return (), (*flags, *c.flags)


RUNTIME = Pyxis()
