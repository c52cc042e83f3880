"""The per-rank step: find this rank's slot of the node, bind it, then exec the command.

A generated job script runs ``python -m chainermn_rt rank -- COMMAND`` once per rank. From the
launcher's variables (:class:`~chainermn_rt.job_env.JobEnvironment`) and the node's slot table
(``CHAINERMN_RT_SLOTS``, written into the script by the Plan) it

1. picks the rank's GPU with :func:`~chainermn_rt.devices.choose_device` (the same call
   ``chainermn_rt.setup()`` makes, so the two never disagree) and the slot of that physical GPU
   (:func:`~chainermn_rt.devices.physical_gpu`: Slurm's ``SLURM_STEP_GPUS`` where set, as
   ``CUDA_VISIBLE_DEVICES`` may be renumbered from 0); the table lists every slot of the node,
   so a job given any of its GPUs finds its own; every GPU the job got stays visible, for
   NCCL's CUDA IPC;
2. binds CPUs to the slot's CPU list (within what the launcher allows) and, with numactl,
   memory to its NUMA node;
3. sets ``UCX_NET_DEVICES`` to the slot's HCAs (MPI's traffic leaves by the rank's nearest
   NIC) and ``NCCL_IB_HCA`` to every HCA of the node's slots, the same on every rank of a node
   as NCCL's maintainers ask (NCCL picks each GPU's nearest NIC itself); neither when set;
4. puts :mod:`chainermn_rt.abort_on_error`'s folder first on ``PYTHONPATH``: an uncaught
   exception in COMMAND's Python aborts the whole job (``CHAINERMN_RT_ABORT_ON_ERROR=0``: not);
5. sends output to a per-rank log when ``CHAINERMN_RT_RANK_LOG`` is set;
6. with ``CHAINERMN_RT_VERBOSE=1``, prints one line saying where the rank runs (:func:`describe`);
7. execs COMMAND.

>>> slots = [Slot(gpu=0, numa=0, cpus="0-3", hcas=("mlx5_0:1",)),
...          Slot(gpu=1, numa=1, cpus="4-7", hcas=("mlx5_1:1",))]
>>> b = binding(slots, {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_LOCALID": "1",
...                     "SLURM_STEP_TASKS_PER_NODE": "2", "CUDA_VISIBLE_DEVICES": "0,1"})
>>> b.slot.gpu, b.device, b.env
(1, 1, {'UCX_NET_DEVICES': 'mlx5_1:1', 'NCCL_IB_HCA': '=mlx5_0:1,mlx5_1:1'})
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chainermn_rt import abort_on_error
from chainermn_rt.bind_check import in_rank
from chainermn_rt.devices import VISIBLE_VAR, choose_device, physical_gpu
from chainermn_rt.errors import UserError, print_line
from chainermn_rt.job_env import JobEnvironment, shown
from chainermn_rt.rank_contract import (
    HOST_LIBS_VAR,
    RANK_LOG_VAR,
    RANK_PID_VAR,
    SLOTS_VAR,
    VERBOSE_VAR,
    Slot,
    check_settings,
    library_path,
    load_slots,
)


@dataclass
class Binding:
    """What the per-rank step applies to this rank."""

    job: JobEnvironment
    slot: Slot | None
    device: int | None
    cpus: list[int] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    unlisted_gpu: str | None = None  # the node's GPU no slot names (the slot: by local rank)


def _slot_of(slots: Sequence[Slot], job: JobEnvironment, device: int | None,
             environ: Mapping[str, str]) -> tuple[Slot, str | None]:
    """The slot of the physical GPU this rank uses; by local rank where GPUs aren't numbered,
    or where no slot names that GPU (then also its name, for the warning)."""
    unlisted = None
    if device is not None:
        physical = physical_gpu(device, environ)
        for slot in slots:
            if str(slot.gpu) == physical:
                return slot, None
        if any(slot.gpu is not None for slot in slots):
            unlisted = physical
    if job.local_rank >= len(slots):
        raise UserError(f"local rank {job.local_rank} has no slot: {SLOTS_VAR} lists "
                        f"{len(slots)}; allowed: at most {len(slots)} ranks per node")
    return slots[job.local_rank], unlisted


def binding(slots: Sequence[Slot] | None, environ: Mapping[str, str]) -> Binding:
    """Decide this rank's binding from the launcher's variables; changes nothing."""
    job = JobEnvironment.detect(environ)
    if job.local_rank is None or job.local_size is None:
        raise UserError(f"launcher {job.launcher} does not report this rank's local rank and "
                        "its node's rank count, which pick its GPU and slot; allowed: srun or an "
                        "MPI's mpirun")
    device = choose_device(job.local_rank, job.local_size, environ)
    if not slots:
        return Binding(job, None, device)
    slot, unlisted = _slot_of(slots, job, device, environ)
    return Binding(job, slot, device, slot.cpu_ids, hca_env(slots, slot, environ), unlisted)


def hca_env(slots: Sequence[Slot], slot: Slot, environ: Mapping[str, str]) -> dict[str, str]:
    """``UCX_NET_DEVICES`` for this rank's slot, ``NCCL_IB_HCA`` for the whole node; what
    ``environ`` already sets wins."""
    node_hcas = list(dict.fromkeys(h for s in slots for h in s.hcas))
    env = {}
    if slot.hcas:
        env["UCX_NET_DEVICES"] = ",".join(slot.hcas)
    if node_hcas:
        env["NCCL_IB_HCA"] = "=" + ",".join(node_hcas)
    return {k: v for k, v in env.items() if k not in environ}


def describe(b: Binding, environ: Mapping[str, str]) -> str:
    """One line, e.g. ``rank 1/4 (local 1/2) on node1: GPU 1 of CUDA_VISIBLE_DEVICES=0,1, ...``."""
    j = b.job
    gpu = "CPU" if b.device is None else \
        f"GPU {b.device} of {VISIBLE_VAR}={environ.get(VISIBLE_VAR, '(unset)')}"
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    hcas = ",".join(b.slot.hcas) if b.slot else ""
    return (f"rank {j.global_rank}/{shown(j.world_size)} (local {j.local_rank}/{j.local_size}) on "
            f"{j.hostname}: {gpu}, CPUs {cpus}" + (f", HCA {hcas}" if hcas else ""))


def _rank_log(pattern: str, job: JobEnvironment, environ: Mapping[str, str]) -> str:
    values = {"%x": environ.get("SLURM_JOB_NAME", "job"), "%j": environ.get("SLURM_JOB_ID", "0"),
              "%r": str(job.global_rank), "%h": job.hostname, "%%": "%"}
    out, i = [], 0
    while i < len(pattern):
        two = pattern[i:i + 2]
        out.append(values.get(two, pattern[i]))
        i += 2 if two in values else 1
    return "".join(out)


def apply(b: Binding, command: list[str], environ: dict[str, str]) -> list[str]:
    """Bind this process (inherited by COMMAND) and return the argv to exec."""
    if b.unlisted_gpu is not None:
        print_line(f"chainermn-rt rank: warning: GPU {b.unlisted_gpu} is in no slot of "
                   f"{SLOTS_VAR} (the profile's topology); binding by local rank "
                   f"{b.job.local_rank}")
    if b.cpus:
        allowed = os.sched_getaffinity(0)
        chosen = set(b.cpus) & allowed
        if chosen:
            os.sched_setaffinity(0, chosen)
        else:
            print_line(f"chainermn-rt rank: warning: CPUs {b.slot.cpus} are outside this task's "
                       f"allowed CPUs {sorted(allowed)}; not binding")
    environ.update(b.env)
    environ.update(abort_on_error.rank_env(environ))
    found = library_path(environ)  # the host's libraries bound in (interconnect.py) first
    if found:
        environ["LD_LIBRARY_PATH"] = found
    environ[RANK_PID_VAR] = str(os.getpid())  # exec keeps it
    pattern = environ.get(RANK_LOG_VAR)
    if pattern:
        path = Path(_rank_log(pattern, b.job, environ))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    if environ.get(VERBOSE_VAR) == "1":
        print(describe(b, environ), flush=True)
    numa = b.slot.numa if b.slot else None
    if numa is not None and shutil.which("numactl") and \
            Path(f"/sys/devices/system/node/node{numa}").is_dir():
        return ["numactl", f"--membind={numa}", "--", *command]
    return command


def main(command: list[str]) -> int:
    """Run COMMAND as this rank; returns only when it can't be started."""
    if not command:
        raise UserError("COMMAND: missing; allowed: the program to run, after `--`")
    try:  # here, before COMMAND's Python arms anything with them
        check_settings(os.environ)
    except UserError as err:
        raise UserError(str(err), everywhere=True) from None
    # what the job bound from the host, against this container's glibc, before MPI_Init
    in_rank(os.environ, tuple(filter(None, os.environ.get(HOST_LIBS_VAR, "").split(":"))))
    raw = os.environ.get(SLOTS_VAR)
    slots = load_slots(raw) if raw else None
    argv = apply(binding(slots, os.environ), command, os.environ)
    try:
        os.execvp(argv[0], argv)
    except OSError as err:
        print_line(f"chainermn-rt rank: error: COMMAND: cannot run {argv[0]!r}: {err.strerror}")
        return 127
