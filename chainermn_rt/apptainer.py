"""Run Apptainer: the host's (``apptainer``, else ``singularity``, on PATH), else the one of the
sandbox's Debian 13 root (:mod:`chainermn_rt.sandbox.root`; Apptainer 1.4.5, whose binaries need
a newer glibc than Debian 12 has). ``make sif`` builds with it, ``doctor --image X.sif`` runs
inside a SIF with it.

In the root only the folders given as ``binds`` are visible (at the same paths): give every
path the command names.

>>> Apptainer("apptainer").argv(["exec", "/img/x.sif", "true"])
['apptainer', 'exec', '/img/x.sif', 'true']
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from chainermn_rt.errors import EnvironmentProblem
from chainermn_rt.sandbox.root import Bind, Root, ensure_root, enter_argv, root_env

TOOLS = ("apptainer", "singularity")


@dataclass(frozen=True)
class Apptainer:
    """``tool`` on the host, or (``root`` given) Apptainer inside the Debian 13 root."""

    tool: str
    root: Root | None = None

    @property
    def where(self) -> str:
        return f"{self.tool} in the Debian 13 root" if self.root else f"the host's {self.tool}"

    def argv(self, args: Iterable[str], binds: Iterable[Bind] = ()) -> list[str]:
        """The command line that runs ``tool ARGS`` (in the root: with ``binds`` visible)."""
        if self.root is None:
            return [self.tool, *args]
        return [*enter_argv(self.root, binds), self.tool, *args]

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The host's environment for the host's tool; the root's plain one inside the root."""
        if self.root is None:
            return {**os.environ, **(extra or {})}
        return root_env(extra)

    def run(self, args: Iterable[str], binds: Iterable[Bind] = (),
            env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
        """``subprocess.run`` of :meth:`argv` (``check=False`` unless given); ``env`` adds to
        :meth:`env`."""
        kwargs.setdefault("check", False)
        return subprocess.run(self.argv(args, binds), env=self.env(env), **kwargs)


def find(say: Callable[[str], None] = lambda line: None) -> Apptainer:
    """The host's Apptainer or Singularity, else the Debian 13 root's (built the first time:
    about a minute). EnvironmentProblem (one line) when there is neither."""
    for tool in TOOLS:
        if shutil.which(tool):
            return Apptainer(tool)
    try:
        root = ensure_root(say=say)
    except EnvironmentProblem as err:
        raise EnvironmentProblem(f"neither apptainer nor singularity is on PATH, and the Debian "
                                 f"13 root that carries Apptainer is not usable: {err}") from None
    return Apptainer("apptainer", root)
