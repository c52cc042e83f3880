"""The container runtimes a profile may name, one module each (``base`` says what each
answers): ``none``, ``apptainer`` and ``singularity``, ``charliecloud``, ``pyxis``. Adding a
runtime is adding a module and its line in :data:`RUNTIMES`. ``enroot_probe`` is no runtime:
the node script asking enroot (pyxis's) where its hooks are and whether it can run.

>>> NAMES
('none', 'apptainer', 'singularity', 'charliecloud', 'pyxis')
"""

from __future__ import annotations

from chainermn_rt.errors import UserError
from chainermn_rt.runtimes import apptainer, charliecloud, none, pyxis
from chainermn_rt.runtimes.base import Container, Runtime

RUNTIMES: dict[str, Runtime] = {r.name: r for r in (
    none.RUNTIME, apptainer.APPTAINER, apptainer.SINGULARITY, charliecloud.RUNTIME,
    pyxis.RUNTIME)}
NAMES = tuple(RUNTIMES)

__all__ = ["NAMES", "RUNTIMES", "Container", "Runtime", "runtime"]


def runtime(name: str, field: str = "--runtime") -> Runtime:
    """The runtime called ``name``; UserError naming ``field`` for another name."""
    if name not in RUNTIMES:
        raise UserError(f"{field}: {name!r} is not known; allowed: {' | '.join(NAMES)}")
    return RUNTIMES[name]
