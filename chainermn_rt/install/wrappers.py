"""The scripts in an install's ``bin/``.

``python3`` and ``python`` run the image's Python with the profile's runtime and binds (the
same argv a job script's rank step gets, the runtime's ``step``: chainermn_rt.runtimes); the
environment passes through, so they work as ranks under ``srun --mpi=pmix``. With runtime
``none`` they run the install's own venv, which sees the site's packages too. pyxis gets
none: its containers are ``srun`` flags, not commands. ``chainermn-rt`` runs on the host
from the install's venv (it calls sbatch, which the image lacks). Scripts, not aliases: an
alias does not reach ``srun``'s tasks.

>>> from chainermn_rt.runtimes import Container
>>> print(python(Container("charliecloud", binds=("/data",)), "/sw/img", "/sw/venv", "0.1.0-cpu"))
#!/bin/sh
# chainermn-rt 0.1.0-cpu: python3 in /sw/img (charliecloud), written by `chainermn-rt install`
exec ch-run --set-env -b /data /sw/img -- python3 "$@"
<BLANKLINE>
"""

from __future__ import annotations

from chainermn_rt.install.layout import NAME
from chainermn_rt.quoting import comment, sh_join
from chainermn_rt.runtimes import Container, runtime


def python(container: Container, image: str | None, venv: str, version: str) -> str | None:
    """The ``python3`` wrapper; None for a runtime without a command (pyxis)."""
    if container.runtime == "none":
        argv, where = (f"{venv}/bin/python3",), f"the install's venv {venv}"
    else:
        argv = runtime(container.runtime).wrapper(container, image)
        if argv is None:
            return None
        where = f"{image} ({container.runtime})"
    return (f"#!/bin/sh\n# {NAME} {comment(version)}: python3 in {comment(where)}, written by "
            f"`chainermn-rt install`\nexec {sh_join(argv, 'the python3 wrapper')} \"$@\"\n")


def chainermn_rt(venv: str, version: str) -> str:
    """``chainermn-rt`` from the install's venv, on the host (by ``-m``: the venv was built
    elsewhere and moved, so its scripts' ``#!`` lines name the wrong place)."""
    argv = sh_join([f"{venv}/bin/python3", "-m", "chainermn_rt"], "--prefix")
    return (f"#!/bin/sh\n# {NAME} {comment(version)}: the command, on the host, written by "
            f"`chainermn-rt install`\nexec {argv} \"$@\"\n")
