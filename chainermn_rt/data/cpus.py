"""How many workers a process starts on its CPUs (those it may run on: a rank's slot binds
them), for the loaders' decoders and ``data pack``'s shard builders alike.

>>> default_workers(spare=1, cpus=8), default_workers(each=2, least=1, cpus=8)
(7, 4)
>>> default_workers(spare=1, cpus=1), default_workers(each=2, least=1, cpus=1)
(0, 1)
"""

from __future__ import annotations

import os


def default_workers(*, each: int = 1, spare: int = 0, least: int = 0,
                    cpus: int | None = None) -> int:
    """Workers of ``each`` CPUs on the CPUs (``cpus``: this process's) less ``spare`` kept for
    other work, at least ``least``."""
    cpus = len(os.sched_getaffinity(0)) if cpus is None else cpus
    return max(least, (cpus - spare) // each)
