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

from chainermn_rt.errors import UserError, message_value

VISIBLE_VAR = "CUDA_VISIBLE_DEVICES"
# What Slurm's gres/gpu plugin sets with CUDA_VISIBLE_DEVICES, first found first: the node's
# own indices of the GPUs it gave the step (every task of an srun step given GPUs; 22.05 and
# 24.11 alike) or the job (the batch step), in CUDA_VISIBLE_DEVICES's order. Under cgroup
# ConstrainDevices=yes CUDA_VISIBLE_DEVICES is renumbered from 0 and these alone name the GPUs.
GPU_LIST_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
# An index, or a GPU/MIG UUID; CUDA ignores everything from the first other entry on.
_ENTRY = re.compile(r"\d+|(GPU|MIG)-[0-9A-Za-z/-]+")
_INDEX = re.compile(r"[0-9]{1,9}")


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


def physical_gpu(device: int, environ: Mapping[str, str] | None = None) -> str:
    """The node's own name of this process's CUDA ordinal ``device`` (as a slot's ``gpu``):

    - Slurm's list of the node's GPU indices (:data:`GPU_LIST_VARIABLES`: ``SLURM_STEP_GPUS``
      in an srun step, else ``SLURM_JOB_GPUS``), its entry at ``device``: Slurm writes it in
      ``CUDA_VISIBLE_DEVICES``'s order, which under cgroup ``ConstrainDevices=yes`` is
      renumbered from 0 and so names the wrong GPU;
    - else ``CUDA_VISIBLE_DEVICES``'s entry at ``device`` (an index or a UUID);
    - else ``device`` (every GPU of the node visible).

    A malformed Slurm list (not comma-separated integers >= 0, or without an entry at
    ``device``) is a ``UserError`` naming it, not ignored: a rank bound by a guess would run on
    another GPU's NUMA node, CPUs and NIC, unseen.

    >>> physical_gpu(0, {"SLURM_STEP_GPUS": "5", "CUDA_VISIBLE_DEVICES": "0"})
    '5'
    >>> physical_gpu(1, {"CUDA_VISIBLE_DEVICES": "3,1"}), physical_gpu(1, {})
    ('1', '1')
    """
    env = os.environ if environ is None else environ
    name = next((n for n in GPU_LIST_VARIABLES if env.get(n, "").strip()), None)
    if name is None:
        visible = visible_gpus(env)
        return visible[device] if visible else str(device)
    entries = [item.strip() for item in env[name].split(",")]
    if device >= len(entries) or not all(_INDEX.fullmatch(e) for e in entries):
        raise UserError(f"environment variable {name}={message_value(env[name], quote=True)}; "
                        "allowed: the node's GPU indices, comma-separated integers >= 0, one "
                        f"per visible GPU (here at least {device + 1}), as Slurm sets it")
    return str(int(entries[device]))


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
