"""What every container runtime is asked: the profile's ``[container]`` table it reads, the
checks of a job's image and flags, what it puts around a rank step, the install's wrapper, and
what ``site init`` looks for on a node. One module per runtime answers them (this folder).

>>> from chainermn_rt.runtimes import runtime
>>> runtime("charliecloud").step(Container(binds=("/data",)), "/img")
(('ch-run', '--set-env', '-b', '/data', '/img', '--'), ())
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from chainermn_rt.quoting import Expanding


@dataclass(frozen=True)
class Container:
    """The profile's ``[container]`` table."""

    runtime: str = "none"
    image: str | None = None
    binds: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    python: str = "python3"


def bind_source(bind: str) -> str:
    """The host side of ``SRC[:DST[:OPTIONS]]``."""
    return bind.split(":")[0]


def within(folder: str, tops: Iterable[str]) -> bool:
    """Whether ``folder`` is one of ``tops`` or below one.

    >>> within("/a/b", ["/a/"]), within("/ab", ["/a"])
    (True, False)
    """
    return any(f"{folder}/".startswith(top.rstrip("/") + "/") for top in tops)


class Runtime:
    """A runtime's answers; the defaults are those of a runtime that wraps nothing."""

    name = ""
    # its image is a file or folder: a sandbox profile's relative one is the checkout's
    file_image = False
    # what an install copies as its image: (".sif" or "dir" or ".sqsh", a phrase for errors)
    install_image: tuple[str, str] | None = None
    # what site init looks for: the command on a node, or an option of srun (a Slurm plugin)
    command: str | None = None
    srun_option: str | None = None
    # folders the runtime shows every container itself (what need not be bound)
    own_mounts: tuple[str, ...] = ()
    # whether a rank step binds the folders Slurm's MPI plugin hands the ranks
    binds_step_folders = False
    # what may start its ranks (site.RANK_LAUNCHERS)
    launchers: tuple[str, ...] = ("srun", "mpirun")

    def check(self, c: Container, image: str | None, field: str, gpus: bool,
              where: str) -> None:
        """UserError (one line, naming ``field`` or the profile's key) for an image or flags
        this runtime cannot run the job's ranks with; ``gpus``: the ranks use GPUs."""

    def check_job_folder(self, folder: str, field: str) -> None:
        """UserError naming ``field`` for a job's folder the runtime cannot run the job in
        (``submit`` checks the folder it submits from)."""

    def step(self, c: Container, image: str | None, exported: tuple[str, ...] = ()
             ) -> tuple[tuple[str, ...], tuple[str | Expanding, ...]]:
        """(argv before the rank step's command, extra srun flags); ``exported``: the names
        of the variables each rank must get from the step, not from the image: those the job
        script exports and those srun's MPI plugin sets per task."""
        return (), ()

    def bind(self, c: Container, folders: Iterable[str], spelled: str = "{0}:{0}",
             shown: tuple[str, ...] = ()) -> Container:
        """``c`` with each host folder bound at the same path (written as ``spelled``), unless
        a bind of ``c`` or one of ``shown`` already holds it."""
        for folder in folders:
            if not within(folder, [*map(bind_source, c.binds), *shown]):
                c = replace(c, binds=(*c.binds, spelled.format(folder)))
        return c

    def image_glibc(self, image: str) -> tuple[int, int] | None:
        """The glibc of ``image`` where this machine can tell (None: it cannot)."""
        return None

    def wrapper(self, c: Container, image: str | None) -> tuple[str, ...] | None:
        """The install's ``python3`` wrapper's argv (None: the runtime has no command)."""
        argv, flags = self.step(c, image)
        return None if flags else (*argv, c.python)
