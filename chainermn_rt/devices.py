"""Which GPU does this rank use? ``CUDA_VISIBLE_DEVICES``-aware, no CUDA import.

Example::

    >>> choose_device(1, 2, {"CUDA_VISIBLE_DEVICES": "3,1"})   # explicit list
    1
    >>> choose_device(1, 2, {"CUDA_VISIBLE_DEVICES": "2"})     # per-task binding
    0
    >>> choose_device(0, 1, {"CUDA_VISIBLE_DEVICES": ""}) is None  # no GPU: CPU
    True
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from chainermn_rt.errors import UserError

VISIBLE_VAR = "CUDA_VISIBLE_DEVICES"
# An index, or a GPU/MIG UUID; CUDA ignores everything from the first other entry on.
_ENTRY = re.compile(r"\d+|(GPU|MIG)-[0-9A-Za-z/-]+")


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES``: None when unset, [] when it hides every GPU.

    >>> visible_gpus({"CUDA_VISIBLE_DEVICES": "0, 1"}), visible_gpus({})
    (['0', '1'], None)
    """
    env = os.environ if environ is None else environ
    raw = env.get(VISIBLE_VAR)
    if raw is None:
        return None
    entries: list[str] = []
    for item in raw.split(","):
        item = item.strip()
        if not _ENTRY.fullmatch(item):  # "", "NoDevFiles", "-1" ... end the list, as in CUDA
            break
        entries.append(item)
    return entries


def count_gpu_devices(dev: str = "/dev") -> int:
    """NVIDIA GPUs this node exposes (``/dev/nvidia0``, ``/dev/nvidia1`` ...)."""
    return sum(1 for p in Path(dev).glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name))


def choose_device(local_rank: int, local_size: int, environ: Mapping[str, str] | None = None,
                  gpu_count: int | None = None) -> int | None:
    """The CUDA ordinal (inside this process) for ``local_rank``, or None to run on CPU.

    - one GPU visible (Slurm's per-task binding): 0;
    - several visible (all of the node's, or an explicit list like ``3,1``): the local rank;
    - ``CUDA_VISIBLE_DEVICES`` unset: the node's GPUs (``gpu_count``, default: counted
      in /dev) are all visible; none there means CPU;
    - more local ranks than visible GPUs: ``UserError``.
    """
    if not 0 <= local_rank < max(local_size, 1):
        raise UserError(f"local rank {local_rank} is outside 0..{local_size - 1} "
                        f"(local size {local_size})")
    visible = visible_gpus(environ)
    if visible is None:
        count = count_gpu_devices() if gpu_count is None else gpu_count
        source = f"{count} GPUs on this node and {VISIBLE_VAR} unset"
    else:
        count = len(visible)
        source = f"{VISIBLE_VAR}={','.join(visible)!r}"
    if count == 0:
        return None
    if count == 1 and visible is not None:
        return 0
    if local_size > count:
        raise UserError(f"{local_size} ranks on this node but only {count} GPUs visible "
                        f"({source}); allowed: at most one rank per GPU (start fewer tasks "
                        "per node, or request more GPUs)")
    return local_rank
