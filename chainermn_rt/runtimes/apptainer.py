"""Runtimes ``apptainer`` and ``singularity``: each rank in ``apptainer exec --nv`` of a SIF
(``make sif``), the caller's environment kept, the profile's binds and flags, and the folders
Slurm's MPI plugin hands the ranks (PMIx's, cray_shasta's) bound where Apptainer would not
show them.

>>> from chainermn_rt.runtimes.base import Container
>>> RUNTIME.step(Container(binds=("/data",), flags=("--writable-tmpfs",)), "/i/x.sif")[0]
('apptainer', 'exec', '--nv', '--bind', '/data', '--writable-tmpfs', '/i/x.sif')
"""

from __future__ import annotations

from chainermn_rt import sif
from chainermn_rt.errors import UserError
from chainermn_rt.runtimes.base import Container, Runtime

# Apptainer's flags that start a container without the caller's environment
CLEAR_ENVIRONMENT = ("--cleanenv", "-e", "--containall", "-C")


class Apptainer(Runtime):
    file_image = True
    install_image = (".sif", "a .sif file (make sif)")
    own_mounts = ("/tmp", "/var/tmp")  # apptainer.conf's `mount tmp`
    binds_step_folders = True

    def __init__(self, name: str):
        self.name = self.command = name

    def check(self, c: Container, image: str | None, field: str, gpus: bool,
              where: str) -> None:
        if not image:
            return
        sif.check_image(image, field, gpus=gpus, where=where)
        cleared = [f for f in c.flags if f.split("=", 1)[0] in CLEAR_ENVIRONMENT]
        if cleared:
            raise UserError(f"container.flags: {cleared[0]} keeps the job's environment from the "
                            "ranks (their slot table, Slurm's and PMIx's variables); allowed: "
                            f"flags that keep it ({self.name} passes the caller's environment "
                            "by default)")

    def step(self, c: Container, image: str | None, exported: tuple[str, ...] = ()
             ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        argv = [self.name, "exec", "--nv"]
        for b in c.binds:
            argv += ["--bind", b]
        return (*argv, *c.flags, image or ""), ()


APPTAINER, SINGULARITY = Apptainer("apptainer"), Apptainer("singularity")
RUNTIME = APPTAINER
