"""Plan: everything a job script says, decided from a Site and a Request, before any text is made.

>>> from chainermn_rt.site import load_site                           # doctest: +SKIP
>>> plan = make_plan(load_site("slurm/sites/dgx-h100.toml"),          # doctest: +SKIP
...                  Request(nodes=2, command=("python", "train.py")))
>>> plan.tasks_per_node, plan.cpus_per_task                           # doctest: +SKIP
(8, 14)

Impossible requests raise :class:`UserError` naming the field and what the site allows.
The templates in slurm/templates/ only format the Plan.
"""

from __future__ import annotations

import json
import posixpath
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from chainermn_rt import sif
from chainermn_rt.errors import UserError
from chainermn_rt.rank_contract import (
    RANK_LOG_PATTERN,
    RANK_LOG_VAR,
    SLOTS_VAR,
    STAGE_DIR_VAR,
    STAGE_FOLDER_PREFIX,
    STAGE_FROM_VAR,
    STAGE_LIVE_JOBS_VAR,
    STOP_DONE_SUFFIX,
    STOP_FILE_VAR,
    STOP_READY_SUFFIX,
    check_settings,
    dump_slots,
)
from chainermn_rt.sbatch_options import owned
from chainermn_rt.site import (
    ENV_NAME,
    RANK_LAUNCHERS,
    RUNTIMES,
    Container,
    Partition,
    Site,
    check_printable,
    parse_memory_mb,
    parse_time,
)
from chainermn_rt.stop_verdict import Rule, table

# The job's log (#SBATCH --output), unless --log says otherwise.
LOG_PATTERN = "%x-%j.out"
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


@dataclass(frozen=True)
class Request:
    """What a user asks for (the ``chainermn-rt render`` arguments)."""

    nodes: int
    command: tuple[str, ...] = ()
    gpus_per_node: int | None = None
    ranks_per_node: int | None = None
    partition: str | None = None
    time: str | None = None
    job_name: str = "chainermn"
    image: str | None = None
    runtime: str | None = None
    launcher: str | None = None
    account: str | None = None
    qos: str | None = None
    memory: str | None = None
    python: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    per_rank_logs: bool = False
    log: str = LOG_PATTERN
    # Run ``python -m MODULE COMMAND...`` with the interpreter the Plan chooses (the doctor's
    # probe, the scaling study's benchmark); None: COMMAND is the whole program.
    module: str | None = None
    # folders on the shared file system copied to every node's local_scratch before the ranks
    # start (``--stage``); the ranks find the copies with chainermn_rt.staging.local_path
    stage: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stop:
    """What the batch shell does on the site's signal (time limit, preemption): create the stop
    file, wait up to ``wait_s`` for the ranks' snapshot, then, when ``requeue``, requeue the
    job (or its array task) while it has been requeued fewer than ``max_requeues`` times:
    ``verdicts``, every case decided."""

    signal: str
    wait_s: int
    requeue: bool
    max_requeues: int
    file_var: str = STOP_FILE_VAR
    done_suffix: str = STOP_DONE_SUFFIX
    ready_suffix: str = STOP_READY_SUFFIX

    @property
    def verdicts(self) -> tuple[Rule, ...]:
        """What the shell does once the step has ended, for every case (stop_verdict.py)."""
        return table(self.wait_s, self.requeue, self.max_requeues)


@dataclass(frozen=True)
class Stage:
    """Data copied to node-local storage: before the ranks start, ``copy`` (one task per node)
    copies source i to ``$STAGE_DIR/<i>``, STAGE_DIR being ``folder`` + the job id; once the
    batch shell ends (also on failure, and before it requeues the job), ``remove`` + STAGE_DIR
    deletes it on every node. ``list_jobs`` prints the user's job ids: the copy step removes
    the folders of other jobs no longer listed that a kill left on its node."""

    sources: tuple[str, ...]
    scratch: str
    copy: tuple[str, ...]
    remove: tuple[str, ...]
    list_jobs: tuple[str, ...] = ("squeue", "--me", "--noheader", "--format=%A")
    dir_var: str = STAGE_DIR_VAR
    from_var: str = STAGE_FROM_VAR
    live_var: str = STAGE_LIVE_JOBS_VAR

    @property
    def folder(self) -> str:
        """The node-local folder's path up to the job id the script appends."""
        return posixpath.join(self.scratch, STAGE_FOLDER_PREFIX)

    @property
    def sources_json(self) -> str:
        return json.dumps(list(self.sources))


def stage_sources(paths: tuple[str, ...]) -> tuple[str, ...]:
    """``--stage`` folders, normalised: absolute, printable, none inside another.

    >>> stage_sources(("/lustre/a/train/", "/lustre/a//val"))
    ('/lustre/a/train', '/lustre/a/val')
    >>> stage_sources(("/lustre/a", "/lustre/a/val"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    chainermn_rt.errors.UserError: --stage: '/lustre/a/val' lies in '/lustre/a', staged already; ...
    """
    allowed = "an absolute path of a folder on the shared file system, other than /"
    sources: list[str] = []
    for path in paths:
        if "\0" in path:
            raise UserError(f"--stage: {path!r} contains a NUL byte; allowed: {allowed}")
        check_printable(path, "--stage")
        if not path.startswith("/"):
            raise UserError(f"--stage: {path!r} is a relative path; allowed: {allowed}")
        norm = "/" + posixpath.normpath(path).lstrip("/")
        if norm == "/":
            raise UserError(f"--stage: {path!r}; allowed: {allowed}")
        for other in sources:
            inner, outer = sorted((norm, other), key=len, reverse=True)
            if inner == outer or inner.startswith(outer + "/"):
                what = "given twice" if inner == outer else f"lies in {outer!r}, staged already"
                raise UserError(f"--stage: {inner!r} {what}; allowed: folders that do not "
                                "contain each other")
        sources.append(norm)
    return tuple(sources)


def _stage(site: Site, part: Partition, req: Request, nodes: int, container: tuple[str, ...],
           pyxis_flags: tuple[str, ...], python: str) -> Stage | None:
    """The copy and removal steps: srun whatever the ranks' launcher (every Slurm allocation
    has it, and a copy needs no MPI), one task on each node; the copy inside the container."""
    if not req.stage:
        return None
    if part.local_scratch is None:
        raise UserError(f"--stage: partition {part.name!r} of site {site.name!r} has no "
                        "local_scratch; allowed: a partition whose profile entry names its "
                        "node-local folder in local_scratch (docs/site-profiles.md)")
    one_per_node = ("srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
                    "--kill-on-bad-exit=1", "--mpi=none")
    return Stage(
        sources=stage_sources(req.stage), scratch=part.local_scratch,
        copy=(*one_per_node, *pyxis_flags, *container, python, "-m", "chainermn_rt", "data",
              "stage", "--job"),
        remove=(*one_per_node, "rm", "-rf", "--"))


def stop_of(site: Site) -> Stop | None:
    """The shell's stop handling, from ``signal = "SIG@SECONDS"``: it waits for the snapshot
    until 15 s before the limit (at least half the lead), then requeues as the profile says.

    >>> from dataclasses import astuple, replace
    >>> from chainermn_rt.site import load_site
    >>> site = load_site("slurm/sites/sandbox.toml")          # signal = "USR2@60", requeue
    >>> astuple(stop_of(site))[:4], astuple(stop_of(replace(site, requeue=False)))[:4]
    (('USR2', 45, True, 3), ('USR2', 45, False, 0))
    """
    if not site.signal:
        return None
    name, _, lead = site.signal.partition("@")
    return Stop(name, max(int(lead) - 15, int(lead) // 2), site.requeue,
                site.max_requeues if site.requeue else 0)


@dataclass(frozen=True)
class Plan:
    """The decided job: #SBATCH options, environment, and the launch line as argv lists."""

    site_name: str
    sbatch: tuple[tuple[str, str | None], ...]
    modules: tuple[str, ...]
    environment: tuple[tuple[str, str], ...]
    launch: tuple[str, ...]
    container: tuple[str, ...]
    rank_step: tuple[str, ...]
    command: tuple[str, ...]
    partition: str
    nodes: int
    tasks_per_node: int
    cpus_per_task: int
    gpus_per_node: int
    stop: Stop | None = None
    stage: Stage | None = None

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node


def _tasks(site: Site, part: Partition, req: Request) -> tuple[int, int]:
    """(tasks per node, GPUs per node) for the request on this partition."""
    slots, gpus = len(part.topology.slots), part.topology.gpus
    if gpus:
        if req.ranks_per_node is not None:
            raise UserError(f"--ranks-per-node: partition {part.name!r} has GPUs, where one rank "
                            f"runs per GPU; allowed: --gpus-per-node 1-{gpus}")
        g = gpus if req.gpus_per_node is None else req.gpus_per_node
        if not 1 <= g <= gpus:
            raise UserError(f"--gpus-per-node: {g} on partition {part.name!r} of site "
                            f"{site.name!r}; allowed: 1-{gpus}")
        return g, g
    if req.gpus_per_node:
        raise UserError(f"--gpus-per-node: partition {part.name!r} of site {site.name!r} has no "
                        f"GPUs; allowed: 0, or a GPU partition: "
                        + (", ".join(p.name for p in site.partitions if p.topology.gpus) or "none"))
    r = slots if req.ranks_per_node is None else req.ranks_per_node
    if not 1 <= r <= slots:
        raise UserError(f"--ranks-per-node: {r} on partition {part.name!r}; allowed: 1-{slots}")
    return r, 0


def _container(site: Site, req: Request, part: Partition, scratch: str | None
               ) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(runtime, argv placed before the rank step, extra launcher flags); ``scratch``: a
    node-local folder the container must see too (staged data), bound at the same path."""
    c = site.container
    if scratch and not any(b.split(":")[0].rstrip("/") == scratch for b in c.binds):
        c = replace(c, binds=(*c.binds, f"{scratch}:{scratch}"))
    runtime = req.runtime or c.runtime
    if runtime not in RUNTIMES:
        raise UserError(f"--runtime: {runtime!r} is not known; allowed: {' | '.join(RUNTIMES)}")
    if runtime == "none":
        return runtime, (), ()
    image = req.image or c.image
    if not image:
        raise UserError(f"--image: runtime {runtime!r} needs an image; allowed: a path or name, "
                        "given with --image or container.image in the site profile")
    field = "--image" if req.image else "container.image"
    check_printable(image, field)
    if runtime in ("apptainer", "singularity"):
        check_apptainer_image(image, field, gpus=part.topology.gpus > 0,
                              where=f"partition {part.name!r}")
        cleared = [f for f in c.flags if f.split("=", 1)[0] in CLEAR_ENVIRONMENT]
        if cleared:
            raise UserError(f"container.flags: {cleared[0]} keeps the job's environment from the "
                            f"ranks ({SLOTS_VAR}, Slurm's and PMIx's variables); allowed: flags "
                            f"that keep it ({runtime} passes the caller's environment by default)")
    return runtime, *container_argv(c, runtime, image)


# Apptainer's flags that start a container without the caller's environment
CLEAR_ENVIRONMENT = ("--cleanenv", "-e", "--containall", "-C")


# What Apptainer reads as a registry or another engine's image, not as a file: `scheme:...`
# (docker://, library://, oras://, docker-daemon:, docker-archive:, oci:, ...) or, unless it
# starts with / ./ ../, a Docker reference with a tag or digest (`chainermn-rt:0.1.0-cpu`,
# `ghcr.io/x/y@sha256:...`).
APPTAINER_SCHEMES = re.compile(r"(docker|docker-daemon|docker-archive|oci|oci-archive|library|"
                               r"oras|shub|https?):")
DOCKER_REFERENCE = re.compile(r"(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9._-]+(?:/[a-z0-9._-]+)*"
                              r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})")


def check_apptainer_image(image: str, field: str, gpus: bool, where: str = "") -> str | None:
    """Refuse what Apptainer would fetch from a registry (the bundle runs SIF files it built:
    ``make sif``); where ``image`` is a file on this machine (the login node sees the cluster's
    shared file systems), refuse one that is not a SIF, and a SIF of the cpu flavour (its
    labels) for ranks with GPUs. Returns the SIF's flavour, or None (not here, not labelled).

    >>> check_apptainer_image("/nowhere/x.sif", "--image", gpus=True) is None
    True
    >>> check_apptainer_image("chainermn-rt:0.1.0-cpu", "--image", gpus=False)
    Traceback (most recent call last):
    ...
    chainermn_rt.errors.UserError: --image: 'chainermn-rt:0.1.0-cpu' is a registry's ...
    """
    explicit_path = image.startswith(("/", "./", "../"))
    if APPTAINER_SCHEMES.match(image) or (not explicit_path and DOCKER_REFERENCE.fullmatch(image)):
        raise UserError(f"{field}: {image!r} is a registry's or an engine's image reference, "
                        "which apptainer would fetch on every node; allowed: the path of a SIF "
                        "file (make sif FLAVOR=...; ./NAME for a file whose name has a ':')")
    path = Path(image)
    if not path.is_file():
        return None  # not on this machine (or an image folder): the runtime says
    try:
        flavor = sif.flavor_of(sif.read_labels(path))
    except sif.NotSif as err:
        raise UserError(f"{field}: {image} is not a SIF file ({err}); allowed: a SIF built by "
                        "make sif") from None
    except OSError as err:
        raise UserError(f"{field}: {image} cannot be read ({err.strerror}); allowed: a SIF "
                        "file this user can read") from None
    if gpus and flavor is not None and not flavor.startswith("gpu"):
        raise UserError(f"{field}: {image} is the {flavor} image (its labels) and the ranks of "
                        f"{where or 'this job'} use GPUs; allowed: a gpu flavour's SIF (make sif "
                        "FLAVOR=gpu), or a partition without GPUs")
    return flavor


def container_argv(c: Container, runtime: str, image: str
                   ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(argv before a command that runs it in ``image``, extra srun flags) for a runtime
    other than none; the job script's rank step and an install's wrappers use it.

    >>> container_argv(Container(binds=("/data",)), "charliecloud", "/img")
    (('ch-run', '--set-env', '-b', '/data', '/img', '--'), ())
    """
    binds = c.binds
    if runtime in ("apptainer", "singularity"):
        argv = [runtime, "exec", "--nv"]
        for b in binds:
            argv += ["--bind", b]
        return (*argv, *c.flags, image), ()
    if runtime == "charliecloud":
        argv = ["ch-run", "--set-env"]
        for b in binds:
            argv += ["-b", b]
        return (*argv, *c.flags, image, "--"), ()
    # pyxis: the container is a property of the srun step, not a wrapper command.
    flags = [f"--container-image={image}"]
    if binds:
        flags.append("--container-mounts=" + ",".join(binds))
    return (), (*flags, *c.flags)


def _launch(site: Site, req: Request, runtime: str, tasks_per_node: int,
            pyxis_flags: tuple[str, ...]) -> tuple[str, ...]:
    launcher = req.launcher or site.launcher
    if launcher not in RANK_LAUNCHERS:
        raise UserError(f"--launcher: {launcher!r} is not known; allowed: "
                        + " | ".join(RANK_LAUNCHERS))
    if launcher == "mpirun":
        if runtime == "pyxis":
            raise UserError("--launcher: mpirun cannot start pyxis containers; allowed: srun "
                            "(or another --runtime)")
        # The per-rank step binds CPUs itself, so the launcher must not.
        return ("mpirun", "--bind-to", "none", "--map-by", f"ppr:{tasks_per_node}:node")
    return ("srun", f"--mpi={site.srun_mpi}", "--cpu-bind=none", "--kill-on-bad-exit=1",
            *pyxis_flags)


def _environment(site: Site, req: Request, part: Partition, tasks_per_node: int,
                 per_rank_logs: bool) -> tuple[tuple[str, str], ...]:
    env = dict(site.environment)
    if site.socket_ifname:
        for name in ("NCCL_SOCKET_IFNAME", "OMPI_MCA_btl_tcp_if_include",
                     "OMPI_MCA_oob_tcp_if_include"):
            env.setdefault(name, site.socket_ifname)
    for key, value in req.env:
        if not ENV_NAME.match(key):
            raise UserError(f"--env: {key!r} is not a variable name; allowed: KEY=VALUE with "
                            "KEY made of letters, digits and _")
        env[key] = check_printable(value, f"--env {key}")
    check_settings(dict(req.env), "--env ")
    ours = (SLOTS_VAR, RANK_LOG_VAR, STAGE_DIR_VAR, STAGE_FROM_VAR, STAGE_LIVE_JOBS_VAR)
    if any(name in env for name in ours):
        raise UserError(f"--env: {', '.join(ours)} are set by chainermn-rt; allowed: any "
                        "other variable")
    env[SLOTS_VAR] = dump_slots(part.topology.slots[:tasks_per_node])
    if per_rank_logs:
        env[RANK_LOG_VAR] = RANK_LOG_PATTERN
    return tuple(env.items())


def make_plan(site: Site, req: Request) -> Plan:
    """Decide the job for ``req`` on ``site``; raises :class:`UserError` when it can't run there."""
    part = site.partition(req.partition)
    if not 1 <= req.nodes <= part.nodes:
        raise UserError(f"--nodes: {req.nodes} on partition {part.name!r}; allowed: "
                        f"1-{part.nodes}")
    if not req.command and req.module is None:
        raise UserError("COMMAND: missing; allowed: the program to run, after `--`")
    if req.module is not None and not MODULE.match(req.module):
        raise ValueError(f"module {req.module!r} is not a Python module name")
    for i, arg in enumerate(req.command):
        if "\0" in arg:
            raise UserError(f"COMMAND[{i}]: contains a NUL byte; allowed: any other text")
    tasks_per_node, gpus = _tasks(site, part, req)
    time = req.time or part.max_time
    if parse_time(time, "--time") > part.max_time_s:
        raise UserError(f"--time: {time} is over partition {part.name!r}'s limit; allowed: up "
                        f"to {part.max_time}")
    memory_mb = None if req.memory is None else parse_memory_mb(req.memory, "--mem")
    if memory_mb is not None and part.memory_mb is not None and memory_mb > part.memory_mb:
        raise UserError(f"--mem: {req.memory} is more than a node of partition {part.name!r} "
                        f"has; allowed: up to {part.memory_mb}M")
    if not re.match(r"[^/\s]", req.job_name or ""):
        raise UserError(f"--job-name: {req.job_name!r}; allowed: a non-empty name not starting "
                        "with a space or /")
    job_name = check_printable(req.job_name, "--job-name")
    log = check_printable(req.log, "--log")
    runtime, container, pyxis_flags = _container(
        site, req, part, part.local_scratch if req.stage else None)
    if req.python and "\0" in req.python:
        raise UserError("--python: contains a NUL byte; allowed: an interpreter's path or name")
    python = req.python or (site.container.python if runtime != "none" else site.python)
    if python is None:  # bare metal, no python in the profile: the interpreter running us
        python = sys.executable
    account, qos = req.account or site.account, req.qos or site.qos
    cpus_per_task = part.cpus_per_node // len(part.topology.slots)

    sbatch: list[tuple[str, str | None]] = []

    def option(name: str, value: str | None = None) -> None:
        sbatch.append((owned(name), value))

    option("job-name", job_name)
    option("partition", part.name)
    option("nodes", str(req.nodes))
    option("ntasks-per-node", str(tasks_per_node))
    option("cpus-per-task", str(cpus_per_task))
    if gpus:
        option("gpus-per-node", f"{part.gpu_type}:{gpus}" if part.gpu_type else str(gpus))
    option("time", time)
    if req.memory:
        option("mem", req.memory)
    if account:
        option("account", check_printable(account, "--account"))
    if qos:
        option("qos", check_printable(qos, "--qos"))
    option("output", log)
    if site.signal:
        option("signal", f"B:{site.signal}")  # the shell's trap handles it
    if site.requeue:
        option("requeue")
        option("open-mode", "append")
    sbatch.extend({**dict(site.sbatch), **dict(part.sbatch)}.items())  # the partition's win

    return Plan(
        site_name=site.name, sbatch=tuple(sbatch), modules=site.modules,
        environment=_environment(site, req, part, tasks_per_node, req.per_rank_logs),
        launch=_launch(site, req, runtime, tasks_per_node, pyxis_flags),
        container=container, rank_step=(python, "-m", "chainermn_rt", "rank", "--"),
        command=(python, "-m", req.module, *req.command) if req.module else tuple(req.command),
        partition=part.name, nodes=req.nodes,
        tasks_per_node=tasks_per_node, cpus_per_task=cpus_per_task, gpus_per_node=gpus,
        stop=stop_of(site),
        stage=_stage(site, part, req, req.nodes, container, pyxis_flags, python))
