"""Which rank am I? One answer from whatever launched this process.

``JobEnvironment.detect()`` reads the variables a launcher sets (Slurm's
``srun``, Open MPI's ``mpirun``, a PMIx server, MPICH's or Intel MPI's Hydra)
before MPI is initialised, so the per-rank step and the training process
agree. ``check_against_mpi`` then compares it with MPI itself.

Example::

    >>> env = JobEnvironment.detect({"SLURM_STEP_ID": "0", "SLURM_PROCID": "3",
    ...     "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_STEP_NUM_TASKS": "4",
    ...     "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"})
    >>> env.launcher, env.global_rank, env.world_size, env.local_rank, env.node_index
    ('slurm', 3, 4, 1, 1)

Kept free of heavy imports: ``chainermn-rt rank`` uses it on every rank.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace

from chainermn_rt.errors import UserError


class LauncherMismatch(RuntimeError):
    """The launcher's variables and MPI disagree about this rank (launcher/MPI mismatch)."""


@dataclass(frozen=True)
class JobEnvironment:
    """This process's place in the job, as the launcher describes it. None: the launcher does not
    say (:func:`check_against_mpi` fills it in)."""

    launcher: str  # slurm, openmpi, pmix, hydra, intelmpi or none
    global_rank: int
    world_size: int | None
    local_rank: int | None
    local_size: int | None
    node_index: int | None
    num_nodes: int | None
    hostname: str

    @classmethod
    def detect(cls, environ: Mapping[str, str] | None = None) -> JobEnvironment:
        """Read ``environ`` (default ``os.environ``); a single process when no launcher is found.

        Precedence: the MPI launcher that started the process directly (Open MPI,
        Hydra/Intel MPI) over Slurm (whose batch-step variables leak into
        ``mpirun``'s children), Slurm steps over bare PMIx (srun --mpi=pmix sets both).
        """
        env = os.environ if environ is None else environ
        host = socket.gethostname()
        for reader in (_openmpi, _hydra, _slurm, _pmix):
            found = reader(env)
            if found is not None:
                return cls(*found, host)
        return cls("none", 0, 1, 0, 1, 0, 1, host)

    def describe(self) -> str:
        """One line for logs, e.g. ``slurm: rank 3/4, local 1/2, node 1/2 on node1`` (``?``: not
        reported)."""
        return (f"{self.launcher}: rank {self.global_rank}/{shown(self.world_size)}, "
                f"local {shown(self.local_rank)}/{shown(self.local_size)}, "
                f"node {shown(self.node_index)}/{shown(self.num_nodes)} on {self.hostname}")

    @property
    def complete(self) -> bool:
        """Whether the launcher reported every field."""
        return None not in (self.world_size, self.local_rank, self.local_size, self.node_index,
                            self.num_nodes)


def first_rank(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is the launcher's rank 0 (or was not started by a launcher; or its
    variables are unreadable): the one that reports what every rank finds alike."""
    try:
        return JobEnvironment.detect(environ).global_rank == 0
    except UserError:
        return True


def shown(value: int | None) -> str:
    """A field for people: the number, or ``?`` when the launcher did not report it."""
    return "?" if value is None else str(value)


def _int(env: Mapping[str, str], name: str, default: int | None = None,
         below: tuple[str, int | None] = ("", None), minimum: int = 0) -> int:
    """The variable as an integer >= ``minimum`` and, with ``below=(NAME, SIZE)``, < SIZE."""
    allowed = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
    raw = env.get(name)
    if raw is None or raw == "":
        if default is None:
            raise UserError(f"environment variable {name} is missing; allowed: {allowed}")
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if value < minimum:
        raise UserError(f"environment variable {name}={raw!r}; allowed: {allowed}")
    size_name, size = below
    if size is not None and value >= size:  # a rank must be below its count
        raise UserError(f"environment variable {name}={raw!r}; allowed: 0..{size - 1} "
                        f"({size_name} is {size})")
    return value


def _reported(env: Mapping[str, str], name: str, **limits) -> int | None:
    """The variable's value, None when it is unset or empty."""
    return _int(env, name, **limits) if env.get(name, "") != "" else None


def _first(env: Mapping[str, str], *names: str) -> str | None:
    return next((n for n in names if env.get(n, "") != ""), None)


def _tasks_per_node(spec: str, node: int, name: str) -> int:
    """Slurm's compressed list, e.g. ``2(x3),1``: the count for node ``node``."""
    counts: list[int] = []
    for part in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match or int(match.group(1)) < 1 or int(match.group(2) or 1) < 1:
            raise UserError(f"environment variable {name}={spec!r}; allowed: e.g. '2(x3),1'")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    if node >= len(counts):
        raise UserError(f"environment variable {name}={spec!r} lists {len(counts)} nodes "
                        f"but SLURM_NODEID is {node}; allowed: a count for each node")
    return counts[node]


def _uniform_node(rank: int, local_rank: int | None, local_size: int | None) -> int | None:
    # Assumes block placement with equal ranks per node (the launchers' default).
    if local_rank is None or not local_size:
        return None
    return (rank - local_rank) // local_size


# Each reader returns (launcher, global_rank, world_size, local_rank, local_size, node_index,
# num_nodes) or None when its launcher did not start this process.
Fields = tuple[str, int, int | None, int | None, int | None, int | None, int | None]


def _slurm(env: Mapping[str, str]) -> Fields | None:
    # Only inside an srun step: the batch script itself also has SLURM_PROCID=0.
    if _first(env, "SLURM_STEP_ID", "SLURM_STEPID") is None or "SLURM_PROCID" not in env:
        return None
    node = _int(env, "SLURM_NODEID", 0)
    per_node = _first(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    ntasks = _first(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
    nnodes = _first(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    world = _int(env, ntasks, minimum=1) if ntasks else None  # None: not reported
    local_size = _tasks_per_node(env[per_node], node, per_node) if per_node else world
    num_nodes = _int(env, nnodes, minimum=1) if nnodes else 1
    sizes = (ntasks, world) if ntasks else ("", None)  # a size Slurm did not report: no check
    node_sizes = (per_node, local_size) if per_node else sizes
    return ("slurm", _int(env, "SLURM_PROCID", below=sizes), world,
            _int(env, "SLURM_LOCALID", 0, below=node_sizes), local_size, node, num_nodes)


def _openmpi(env: Mapping[str, str]) -> Fields | None:
    if "OMPI_COMM_WORLD_RANK" not in env:
        return None
    size = _int(env, "OMPI_COMM_WORLD_SIZE", minimum=1)
    rank = _int(env, "OMPI_COMM_WORLD_RANK", below=("OMPI_COMM_WORLD_SIZE", size))
    local_size = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, minimum=1)
    local = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0,
                 below=("OMPI_COMM_WORLD_LOCAL_SIZE", local_size))
    nodes = _first(env, "OMPI_MCA_orte_num_nodes", "OMPI_MCA_prte_num_nodes")
    return ("openmpi", rank, size, local, local_size, _uniform_node(rank, local, local_size),
            _int(env, nodes, minimum=1) if nodes else -(-size // local_size))


def _slurm_pmi(env: Mapping[str, str]) -> bool:
    """Whether PMI_* come from Slurm's pmi2 plugin (srun --mpi=pmi2 names the step in
    PMI_JOBID, JOB.STEP), not from Hydra's mpiexec."""
    step = _first(env, "SLURM_STEP_ID", "SLURM_STEPID")
    return step is not None and \
        env.get("PMI_JOBID") == f"{env.get('SLURM_JOB_ID')}.{env[step]}"


def _hydra(env: Mapping[str, str]) -> Fields | None:
    if "PMI_RANK" not in env or _slurm_pmi(env):
        return None
    size = _reported(env, "PMI_SIZE", minimum=1)
    rank = _int(env, "PMI_RANK", below=("PMI_SIZE", size))
    local_size = _reported(env, "MPI_LOCALNRANKS", minimum=1)
    local = _reported(env, "MPI_LOCALRANKID", below=("MPI_LOCALNRANKS", local_size))
    intel = _first(env, "I_MPI_ROOT", "I_MPI_HYDRA_BOOTSTRAP") is not None
    return ("intelmpi" if intel else "hydra", rank, size, local, local_size,
            _uniform_node(rank, local, local_size),
            -(-size // local_size) if size is not None and local_size else None)


def _pmix(env: Mapping[str, str]) -> Fields | None:
    # A PMIx server names the rank only; MPI supplies the rest (check_against_mpi).
    if "PMIX_RANK" not in env:
        return None
    return ("pmix", _int(env, "PMIX_RANK"), None, None, None, None, None)


def check_against_mpi(env: JobEnvironment, comm) -> JobEnvironment:
    """Compare ``env`` with the mpi4py communicator ``comm``; return it completed by MPI.

    Raises ``LauncherMismatch`` when rank or size disagree, e.g. every rank of an
    ``srun`` step reporting rank 0 of 1 because mpi4py's MPI does not speak the
    launcher's process-management interface. Fields the launcher did not report (None)
    are filled in from MPI.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    said_size = size if env.world_size is None else env.world_size
    if env.launcher != "none" and (env.global_rank, said_size) != (rank, size):
        hint = (" Every rank seeing rank 0 of 1 means this MPI library was not started by "
                "this launcher: use the launcher of the MPI mpi4py is built against "
                "(with Slurm: srun --mpi=pmix for Open MPI), or mpirun from the same MPI."
                if size == 1 else "")
        raise LauncherMismatch(
            f"launcher {env.launcher} says rank {env.global_rank} of {shown(env.world_size)} but "
            f"MPI says rank {rank} of {size} on {env.hostname}.{hint}")
    if env.launcher == "none" and size > 1:
        raise LauncherMismatch(
            f"no launcher variables found but MPI says rank {rank} of {size} on "
            f"{env.hostname}: start ranks with srun or mpirun, which set them")
    if env.complete:
        return env
    return _complete_from_mpi(env, comm)


def _complete_from_mpi(env: JobEnvironment, comm) -> JobEnvironment:
    """Local and node numbers from MPI processor names (what ChainerMN uses too)."""
    from mpi4py import MPI

    names = comm.allgather(MPI.Get_processor_name())
    rank = comm.Get_rank()
    nodes = list(dict.fromkeys(names))
    mine = [r for r, n in enumerate(names) if n == names[rank]]
    return replace(env, world_size=comm.Get_size(), local_rank=mine.index(rank),
                   local_size=len(mine), node_index=nodes.index(names[rank]),
                   num_nodes=len(nodes))
