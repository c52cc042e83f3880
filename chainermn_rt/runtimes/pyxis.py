"""Runtime ``pyxis``: NVIDIA's Slurm plugin over enroot. The container is a property of the
srun step, not a command: the install has no ``python3`` wrapper, and ``mpirun`` cannot start
such ranks (the Plan refuses it). What the step's flags say, as the ranks run bare metal:

- ``--container-mounts``: the profile's binds and the folders the Plan adds, then the job's
  folder (``$PWD`` where the script runs: the stop file and the timeline are in it) at the same
  path; ``--container-workdir`` is that folder (pyxis would start the ranks in the container's
  own working folder, the home);
- ``--container-env``: the variables the job script exports win over the image's ENV (pyxis
  keeps the image's values of the others; the image's other ENV still reaches the ranks), but
  for PATH and the loader's, which stay the container's; and those srun's MPI plugin sets per
  task (pmi2's ``PMI_RANK``, ``PMI_FD``, ...): enroot's PMI hook writes the first task's into
  the container's environment, where they beat every other task's own (ranks of one node
  then share a rank: MPICH's ``MPI_Init`` fails or hangs);
- ``--no-container-mount-home`` (unless the profile's flags ask for the home);
- ``--container-name=chainermn-rt-JOBID`` for a registry's image only: pyxis imports such an
  image for every unnamed step, a named one once per node and job (the stage copy step and the
  ranks share it; ``container_scope=job`` removes it when the job ends). A SquashFS file stays
  unnamed: with ``use_squashfuse`` each step mounts it, a named one would be unpacked on every
  node (docs/site-profiles.md).

>>> from chainermn_rt.quoting import sh_join
>>> _, flags = RUNTIME.step(Container(binds=("/data", "/s:/s:ro")), "/i/x.sqsh", ("A", "B"))
>>> print(sh_join(flags))
--container-image=/i/x.sqsh --container-mounts=/data,/s:/s:ro,"${PWD}" \
--container-workdir="${PWD}" --container-env=A,B --no-container-mount-home
"""

from __future__ import annotations

import os
import stat

from chainermn_rt import sif
from chainermn_rt.errors import UserError
from chainermn_rt.quoting import Expanding
from chainermn_rt.runtimes.base import Container, Runtime

SQUASHFS_MAGIC = b"hsqs"  # at byte 0 of a SquashFS (little-endian)
NAME = "chainermn-rt-"    # the job's named container: NAME + its job id
# flags the step writes itself (a second one is pyxis's "specified multiple times"), and one
# no rank needs (root inside the container; enroot's default is the job's user)
OWN_FLAGS = ("--container-image", "--container-mounts", "--container-workdir",
             "--container-env", "--container-name")
REFUSED_FLAGS = ("--container-remap-root",)
MOUNT_HOME = "--container-mount-home"
# the container's own, as pyxis keeps them from enroot: the image's PATH finds its python3
CONTAINER_OWN = ("PATH", "LD_LIBRARY_PATH", "LD_PRELOAD")
MOUNT_SOURCES = ("tmpfs", "umount")  # pyxis's mount sources that are not paths


def is_file_image(image: str) -> bool:
    """Whether pyxis takes ``image`` for a SquashFS file (it starts with ``/`` or ``.``), not
    for a registry's image."""
    return image.startswith(("/", "."))


class Pyxis(Runtime):
    name = "pyxis"
    file_image = True  # a SquashFS file (make sqfs), or a registry's reference
    install_image = (".sqsh", "a squashfs file ending in .sqsh (make sqfs)")
    launchers = ("srun",)
    command = "enroot"  # on every node: pyxis calls it
    srun_option = "--container-image"

    def check(self, c: Container, image: str | None, field: str, gpus: bool,
              where: str) -> None:
        if image:
            _check_image(image, field)
        for i, bind in enumerate(c.binds):
            _check_bind(bind, f"container.binds[{i}]")
        for flag in c.flags:
            name = flag.split("=", 1)[0]
            if name in OWN_FLAGS:
                raise UserError(f"container.flags: {name} is written by chainermn-rt (the "
                                "image, the binds, the job's folder, its variables, its "
                                f"container's name); allowed: other pyxis flags")
            if name in REFUSED_FLAGS:
                raise UserError(f"container.flags: {name} makes the ranks root inside the "
                                "container, which no rank needs; allowed: flags without it "
                                "(the ranks run as the job's user)")

    def check_job_folder(self, folder: str, field: str) -> None:
        if "," in folder or ":" in folder:
            raise UserError(f"{field}: {folder} holds ',' or ':', on which pyxis splits "
                            "--container-mounts (the job's folder is mounted); allowed: a "
                            "folder without them")

    def step(self, c: Container, image: str | None, exported: tuple[str, ...] = ()
             ) -> tuple[tuple[str, ...], tuple[str | Expanding, ...]]:
        mounts = "".join(f"{b}," for b in c.binds)
        flags: list[str | Expanding] = [
            f"--container-image={image}",
            Expanding((f"--container-mounts={mounts}", "PWD", "")),
            Expanding(("--container-workdir=", "PWD", ""))]
        kept = [name for name in exported if name not in CONTAINER_OWN]
        if kept:
            flags.append("--container-env=" + ",".join(kept))
        if MOUNT_HOME not in c.flags:
            flags.append("--no-container-mount-home")
        if image and not is_file_image(image):
            flags.append(Expanding((f"--container-name={NAME}", "SLURM_JOB_ID:-$$", "")))
        return (), (*flags, *c.flags)


def _check_image(image: str, field: str) -> None:
    """A file pyxis would run must be a SquashFS: refuse a SIF or a folder (by its name where
    it is not on this machine), a file without SquashFS's magic, and a relative name of a file
    here (pyxis would take it for a registry's image)."""
    allowed = "allowed: a SquashFS file (make sqfs), or a registry's image"
    try:
        mode = os.stat(image).st_mode
    except (OSError, ValueError):  # not on this machine (the nodes' file), or no file's name
        mode = None
    if not is_file_image(image):
        if mode is not None:
            raise UserError(f"{field}: {image!r} is a file or folder here, which pyxis would "
                            f"take for a registry's image; allowed: ./{image} or its absolute "
                            "path")
        return
    if image.lower().endswith(".sif"):
        raise UserError(f"{field}: {image} is a SIF (Apptainer's image), which pyxis cannot "
                        f"run; {allowed}")
    if image.endswith("/") or (mode is not None and stat.S_ISDIR(mode)):
        raise UserError(f"{field}: {image} is a folder, which pyxis cannot run; {allowed}")
    if mode is None:
        return
    if not stat.S_ISREG(mode):
        raise UserError(f"{field}: {image} is not a regular file; {allowed}")
    try:
        with open(image, "rb") as f:
            head = f.read(sif.MAGIC_AT + len(sif.MAGIC))
    except OSError as err:
        raise UserError(f"{field}: {image} cannot be read ({err.strerror}); {allowed} this "
                        "user can read") from None
    if head[sif.MAGIC_AT:] == sif.MAGIC:
        raise UserError(f"{field}: {image} is a SIF (Apptainer's image), which pyxis cannot "
                        f"run; {allowed}")
    if not head.startswith(SQUASHFS_MAGIC):
        raise UserError(f"{field}: {image} is not a SquashFS file (no 'hsqs' at its start); "
                        f"{allowed}")


def _check_bind(bind: str, field: str) -> None:
    """pyxis splits a mount on ':' into SRC:DST[:FLAGS] (FLAGS joined by '+'); SRC a path,
    tmpfs or umount, DST a path."""
    parts = bind.split(":")
    source, target = parts[0], parts[1] if len(parts) > 1 else parts[0]
    if not (is_file_image(source) or source in MOUNT_SOURCES) or not is_file_image(target):
        raise UserError(f"{field}: {bind!r} is read by pyxis as SRC:DST[:FLAGS], split on "
                        "':' (a path holding ':' or ',' cannot be mounted); "
                        "allowed: absolute paths, flags joined by '+' (/data:/data:ro+rprivate)")


RUNTIME = Pyxis()
