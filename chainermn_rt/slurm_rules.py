"""What Slurm accepts in the values the bundle writes into a job script or reads back (time
strings, memory sizes, printable text; every check names where the value came from), and
what changed between Slurm versions, as one table (:data:`CHANGES`).

>>> parse_time("1-02:00:00", "--time"), parse_memory_mb("64G", "--mem")
(93600, 65536)
>>> check_printable("a\\nb", "--job-name")  # doctest: +ELLIPSIS
Traceback (most recent call last):
chainermn_rt.errors.UserError: --job-name: 'a\\nb' contains a control character; ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chainermn_rt.errors import EnvironmentProblem, UserError, message_value
from chainermn_rt.slurm_records import MAX_MEMORY_MB

MEMORY = re.compile(r"([0-9]{1,16})([KMGT]?)\Z")
_TIME = re.compile(r"(?:([0-9]{1,9})-)?([0-9]{1,9})(?::([0-9]{1,9}))?(?::([0-9]{1,9}))?\Z")


def one_per_node(nodes: int) -> tuple[str, ...]:
    """srun of one task on each of a job's ``nodes`` nodes, without MPI (a bare step of the
    batch shell: staging's copy, the doctor's node check); the tasks are named, as the job's
    ntasks would win over ``--ntasks-per-node`` alone."""
    return ("srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=1", "--mpi=none")


def parse_time(text: str, where: str) -> int:
    """Seconds in a Slurm time string: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``.

    >>> parse_time("1-02:00:00", "time"), parse_time("90", "time"), parse_time("5:30", "time")
    (93600, 5400, 330)
    """
    m = _TIME.match(text) if isinstance(text, str) else None  # no blanks: a #SBATCH value
    if not m:
        shown = message_value(text, quote=True) if isinstance(text, str) else repr(text)
        raise UserError(f"{where}: {shown} is not a Slurm time; allowed: MIN, MIN:SEC, "
                        "HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS")
    days, a, b, c = m.groups()
    if days is None:
        if b is None:
            return int(a) * 60
        if c is None:
            return int(a) * 60 + int(b)
        return int(a) * 3600 + int(b) * 60 + int(c)
    return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)


def parse_memory_mb(text: str, where: str) -> int:
    """Megabytes in a Slurm memory string (``4000``, ``64G``, ``2T``)."""
    m = MEMORY.match(str(text)) if isinstance(text, (str, int)) else None
    if not m:
        shown = message_value(text, quote=True) if isinstance(text, str) else repr(text)
        raise UserError(f"{where}: {shown} is not a memory size; allowed: a number with an "
                        "optional K, M, G or T suffix (default M), e.g. 64G")
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2)]
    mb = int(int(m.group(1)) * scale)
    if mb > MAX_MEMORY_MB:
        raise UserError(f"{where}: {text} is more than a node has; allowed: at most "
                        f"{MAX_MEMORY_MB >> 20}T")
    return mb


def check_printable(value: str, where: str) -> str:
    """Refuse control characters (a newline would end a #SBATCH line); the rest gets quoted."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UserError(f"{where}: {value!r} contains a control character; allowed: printable "
                        "text")
    return value


# -- what changed between Slurm versions ----------------------------------------------------
# A profile's ``slurm_version`` ("24.11", as ``site init`` reads it from the cluster) decides;
# a profile without one is taken as today's Slurm (the newest behaviour below). Each row was
# seen on the sandbox's two stacks (22.05 on Debian 12, 24.11 on Debian 13) or is Slurm's own
# release note (docs/sandbox.md: "Slurm versions").

VERSION = re.compile(r"([0-9]{2})\.([0-9]{2})(?:\.([0-9]{1,3}))?(?:-[0-9A-Za-z.+~-]*)?\Z")
VERSION_ALLOWED = "MAJOR.MINOR as Slurm numbers its releases (22.05, 24.11), or with .PATCH"


def parse_slurm_version(text: str, where: str) -> tuple[int, int]:
    """(year, month) of a Slurm release from ``24.11``, ``24.11.5`` or Debian's ``24.11.5-4``.

    >>> parse_slurm_version("24.11.5", "slurm_version"), parse_slurm_version("22.05", "x")
    ((24, 11), (22, 5))
    """
    m = VERSION.match(text) if isinstance(text, str) else None
    if not m:
        shown = message_value(text, quote=True) if isinstance(text, str) else repr(text)
        raise UserError(f"{where}: {shown} is not a Slurm version; allowed: {VERSION_ALLOWED}")
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class Change:
    """A behaviour of Slurm's that began with release ``since`` (year, month)."""

    name: str
    since: tuple[int, int]
    what: str
    bundle: str  # what the bundle does about it


CHANGES = (
    Change("cpus_per_task_two_variables", (23, 11),
           "srun stops with \"cpus-per-task set by two different environment variables\" when "
           "the job's environment sets SLURM_CPUS_PER_TASK unlike the job's --cpus-per-task "
           "(22.05 takes the variable: each rank gets that many CPUs, not the Plan's)",
           "the Plan owns --cpus-per-task: --env and [environment] may not set "
           "SLURM_CPUS_PER_TASK, SRUN_CPUS_PER_TASK or SLURM_TRES_PER_TASK; the refusal says "
           "what the profile's Slurm would do"),
    Change("preempted_end_requeues", (24, 5),
           "a job that ends after a preemption's grace-time signal is taken as preempted: "
           "under PreemptMode=REQUEUE Slurm requeues it itself (22.05 ends it). The mark "
           "outlives `scontrol requeue`, so a job that requeued itself after the signal is "
           "requeued once more when its next run ends (seen on 24.11.5: the resumed run "
           "COMPLETED, then PREEMPTED and a third run)",
           "the batch shell of a preempted job (scontrol show job: PreemptTime set) writes "
           "its snapshot and ends without requeueing itself: Slurm requeues it; the time "
           "limit's signal still has the shell requeue the job"),
    Change("namespace_type", (25, 11),
           "JobContainerType is renamed NamespaceType in slurm.conf",
           "nothing: the bundle writes neither (the sandbox mounts each node's scratch itself)"),
    Change("expedited_requeue", (25, 11),
           "sbatch --requeue=expedite requeues a job at once on a node failure",
           "not used: the job script requeues itself after its snapshot (scontrol requeue)"),
)
NEWEST = max(c.since for c in CHANGES)


def slurm_version(conf: dict[str, str]) -> str | None:
    """``MAJOR.MINOR`` of ``scontrol show config``'s SLURM_VERSION (a dict of its records);
    None when it names none; EnvironmentProblem when it is not a version.

    >>> slurm_version({"SLURM_VERSION": "24.11.5"}), slurm_version({})
    ('24.11', None)
    """
    text = conf.get("SLURM_VERSION")
    if text is None:
        return None
    try:
        year, month = parse_slurm_version(text, "scontrol show config: SLURM_VERSION")
    except UserError as err:  # the rule is the profile's; the value came from Slurm
        raise EnvironmentProblem(str(err)) from None
    return f"{year:02d}.{month:02d}"


def behaves(version: tuple[int, int] | None, name: str) -> bool:
    """Whether Slurm ``version`` (None: today's, the newest) has the change ``name``.

    >>> two = "cpus_per_task_two_variables"
    >>> behaves((22, 5), two), behaves((24, 11), two), behaves(None, two)
    (False, True, True)
    """
    change = next(c for c in CHANGES if c.name == name)
    return (version or NEWEST) >= change.since


# Slurm's own, set from the job's --cpus-per-task, which the Plan owns: a job's environment
# (a profile's [environment], --env) may not set them.
CPUS_PER_TASK_VARIABLES = ("SLURM_CPUS_PER_TASK", "SRUN_CPUS_PER_TASK", "SLURM_TRES_PER_TASK")


def check_variable(name: str, where: str, version: tuple[int, int] | None) -> None:
    """Refuse one of :data:`CPUS_PER_TASK_VARIABLES`, saying what Slurm ``version`` would do.

    >>> check_variable("OMP_NUM_THREADS", "--env", None)
    >>> check_variable("SLURM_CPUS_PER_TASK", "--env", (22, 5))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    chainermn_rt.errors.UserError: --env: SLURM_CPUS_PER_TASK is Slurm's, ... every rank gets ...
    """
    if name not in CPUS_PER_TASK_VARIABLES:
        return
    effect = ("srun stops (\"cpus-per-task set by two different environment variables\")"
              if behaves(version, "cpus_per_task_two_variables") else
              "every rank gets that many CPUs instead of the Plan's")
    release = f"{version[0]:02d}.{version[1]:02d}" if version else "of today"
    raise UserError(f"{where}: {name} is Slurm's, made from the job's --cpus-per-task; set "
                    f"here, {effect} on Slurm {release}; allowed: any other variable (a "
                    "rank's CPUs come from the partition's cpus_per_node and slots)")


# -- the folders Slurm's PMIx plugin hands a step's ranks ------------------------------------
# Slurm's defaults where slurm.conf (and a profile) is silent
DEFAULT_TMPFS, DEFAULT_SPOOL = "/tmp", "/var/spool/slurmd"
NODE_FOLDER_ALLOWED = ("an absolute path as slurm.conf writes it (%n and %h for the node's "
                       "name and host), without spaces, ',', ':' or '$'")
_NODE_FOLDER = re.compile(r"/[^\s,:$]*\Z")


def check_node_folder(value: str, where: str) -> str:
    """``TmpFS`` or ``SlurmdSpoolDir`` as slurm.conf (or a profile) writes it.

    >>> check_node_folder("/local/%n/tmp", "slurm_tmpfs")
    '/local/%n/tmp'
    >>> check_node_folder("/a:b", "slurm_tmpfs")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    chainermn_rt.errors.UserError: slurm_tmpfs: '/a:b' is not allowed; allowed: an absolute ...
    """
    if not _NODE_FOLDER.match(value) or not value.isprintable():
        raise UserError(f"{where}: {message_value(value, quote=True)} is not allowed; "
                        f"allowed: {NODE_FOLDER_ALLOWED}")
    return value


def _fixed(value: str) -> str | None:
    """A node folder up to its first part that names the node (``%n``, ``%h``): the same path
    on every node; None where that is ``/`` (never the whole file system)."""
    parts = value.rstrip("/").split("/")
    fixed = next((i for i, part in enumerate(parts) if "%" in part), len(parts))
    return "/".join(parts[:fixed]) if fixed > 1 else None


def pmix_folders(tmpfs: str | None) -> tuple[str, ...]:
    """The host folder holding what Slurm's PMIx plugin gives a step's ranks: the client's
    temporary folder (``TmpFS/spmix_appdir_*``, where Open MPI makes its session folder),
    given up to its first part that names the node (``%n``, ``%h``), the same path on every
    node. A container must see it: unbound, every rank of the image's Open MPI failed in
    ``MPI_Init`` (``session_dir.c``). The server's folder (``SlurmdSpoolDir/pmix.JOB.STEP``)
    is not bound: the images' PMIx clients reach the server over TCP without it (the sandbox's
    jobs ran with it unbound), and a bind whose source a node lacks stops Apptainer.

    >>> pmix_folders("/srv/sbx/tmp/%n"), pmix_folders(None)
    (('/srv/sbx/tmp',), ('/tmp',))
    """
    found = _fixed(tmpfs or DEFAULT_TMPFS)
    return (found,) if found else ()


# What Slurm's MPI plugin sets in each task's own environment (its rank and its PMI socket),
# besides the step's: pmi2's, read by MPICH's PMI-1 and PMI-2 clients. pmix's PMIX_RANK is
# the only one of its kind and pmix clients take it from the server too.
TASK_VARIABLES = {"pmi2": ("PMI_FD", "PMI_JOBID", "PMI_RANK", "PMI_SIZE")}


def task_variables(srun_mpi: str) -> tuple[str, ...]:
    """The variables ``srun --mpi=srun_mpi`` gives each task of its own.

    >>> task_variables("pmi2")[:3], task_variables("pmix")
    (('PMI_FD', 'PMI_JOBID', 'PMI_RANK'), ())
    """
    return TASK_VARIABLES.get(srun_mpi, ())


def step_folders(srun_mpi: str, tmpfs: str | None, spool: str | None) -> tuple[str, ...]:
    """The host folders Slurm's MPI plugin ``srun_mpi`` hands a step's ranks: PMIx's
    (:func:`pmix_folders`), ``cray_shasta``'s ``SlurmdSpoolDir/mpi_cray_shasta`` (its
    ``PALS_SPOOL_DIR``), none for ``pmi2`` (its variables alone).

    >>> step_folders("cray_shasta", None, None), step_folders("pmi2", None, None)
    (('/var/spool/slurmd',), ())
    """
    if srun_mpi.startswith("pmix"):
        return pmix_folders(tmpfs)
    if srun_mpi == "cray_shasta":
        return tuple(f for f in (_fixed(spool or DEFAULT_SPOOL),) if f)
    return ()
