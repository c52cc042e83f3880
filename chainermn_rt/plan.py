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

import sys
from dataclasses import dataclass

from chainermn_rt.bind_check import at_render
from chainermn_rt.errors import UserError
from chainermn_rt.job_request import Request, checked
from chainermn_rt.quoting import Expanding
from chainermn_rt.rank_contract import (
    HOST_LIBS_VAR,
    METRICS_DIR_VAR,
    RANK_LOG_PATTERN,
    RANK_LOG_VAR,
    SLOTS_VAR,
    STOP_DONE_SUFFIX,
    STOP_FILE_VAR,
    STOP_READY_SUFFIX,
    TIMELINE_FOLDER,
    TIMELINE_VAR,
    dump_slots,
)
from chainermn_rt.runtimes import RUNTIMES, runtime
from chainermn_rt.sbatch_options import owned
from chainermn_rt.site import RANK_LAUNCHERS, Partition, Site
from chainermn_rt.slurm_rules import behaves, step_folders, task_variables
from chainermn_rt.staging import VARIABLES as STAGE_VARIABLES
from chainermn_rt.staging import Stage, plan_stage
from chainermn_rt.stop_verdict import Rule, table


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
    # the site's Slurm requeues a preempted job itself once it ends (slurm_rules.CHANGES'
    # preempted_end_requeues): the shell asks scontrol whether the job was preempted
    slurm_requeues_preempted: bool = False
    file_var: str = STOP_FILE_VAR
    done_suffix: str = STOP_DONE_SUFFIX
    ready_suffix: str = STOP_READY_SUFFIX

    @property
    def verdicts(self) -> tuple[Rule, ...]:
        """What the shell does once the step has ended, for every case (stop_verdict.py)."""
        return table(self.wait_s, self.requeue, self.max_requeues,
                     self.slurm_requeues_preempted)


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
                site.max_requeues if site.requeue else 0,
                site.requeue and behaves(site.slurm_release, "preempted_end_requeues"))


@dataclass(frozen=True)
class Timeline:
    """The step timeline (``--timeline``): the script exports ``var`` as the folder ``folder``
    + ``/<job id>`` in the job's working folder; a program calling chainermn_rt.timeline
    records there (a requeued run appends), and ``chainermn-rt timeline JOBID`` finds it."""

    var: str = TIMELINE_VAR
    folder: str = TIMELINE_FOLDER


@dataclass(frozen=True)
class NodeCheck:
    """A bare step before the ranks' (the doctor's, doctor/node_check.py): ``argv`` on every
    node, its output written to ``output``; the shell goes on whatever it says."""

    argv: tuple[str, ...]
    output: str


@dataclass(frozen=True)
class Plan:
    """The decided job: #SBATCH options, environment, and the launch line as argv lists."""

    site_name: str
    sbatch: tuple[tuple[str, str | None], ...]
    modules: tuple[str, ...]
    environment: tuple[tuple[str, str], ...]
    launch: tuple[str | Expanding, ...]  # Expanding: a word holding $PWD (pyxis's flags)
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
    timeline: Timeline | None = None
    runtime: str = "none"
    image: str | None = None  # what the ranks' container runs, as the runtime is given it
    node_check: NodeCheck | None = None

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


def _container(site: Site, req: Request, part: Partition, folders: tuple[str | None, ...],
               exported: tuple[str, ...]
               ) -> tuple[str, tuple[str, ...], tuple[str | Expanding, ...]]:
    """(runtime, argv placed before the rank step, extra launcher flags); ``folders``: host
    folders the container must see too (staged data's node-local scratch, the metrics folder),
    each bound at the same path unless the profile's binds have it; ``exported``: the
    variables the script exports (srun's per-task ones are added: runtimes/base.py); the
    runtime's own checks (chainermn_rt.runtimes) and, for one that binds them, the folders
    Slurm's PMIx plugin hands the ranks (slurm_rules.step_folders) where it would not show
    them."""
    name = req.runtime or site.container.runtime
    kind = runtime(name)
    if name == "none":
        at_render(site.mpi, site.nccl, None)
        return name, (), ()
    image = req.image or site.container.image
    if not image:
        raise UserError(f"--image: runtime {name!r} needs an image; allowed: a path or name, "
                        "given with --image or container.image in the site profile")
    # the profile's image for another runtime (--runtime apptainer with sandbox-pyxis's
    # SquashFS): the argument is what chose it
    field = "--image" if req.image else "container.image" if name == site.container.runtime \
        else f"--runtime {name} with container.image"
    # a cpu SIF where the ranks have GPUs is refused, but for the sandbox's fake ones
    kind.check(site.container, image, field,
               gpus=part.topology.gpus > 0 and site.sandbox is None,
               where=f"partition {part.name!r}")
    c = kind.bind(site.container, filter(None, folders))
    if kind.binds_step_folders and (req.launcher or site.launcher) == "srun":
        c = kind.bind(c, step_folders(site.srun_mpi, site.slurm_tmpfs, site.slurmd_spool_dir),
                      "{0}", kind.own_mounts)
    at_render(site.mpi, site.nccl, kind.image_glibc(image) if site.host_libraries else None)
    if (req.launcher or site.launcher) == "srun":
        exported = (*exported, *task_variables(site.srun_mpi))
    return name, *kind.step(c, image, exported)


def _exported(environment: tuple[tuple[str, str], ...], stop: Stop | None,
              timeline: Timeline | None, staged: bool) -> tuple[str, ...]:
    """The names of the variables the job script exports, in its order."""
    return (*(name for name, _ in environment), *((timeline.var,) if timeline else ()),
            *(STAGE_VARIABLES if staged else ()), *((stop.file_var,) if stop else ()))


def _launch(site: Site, req: Request, runtime: str, tasks_per_node: int,
            pyxis_flags: tuple[str | Expanding, ...]) -> tuple[str | Expanding, ...]:
    launcher = req.launcher or site.launcher
    if launcher not in RANK_LAUNCHERS:
        raise UserError(f"--launcher: {launcher!r} is not known; allowed: "
                        + " | ".join(RANK_LAUNCHERS))
    if launcher not in RUNTIMES[runtime].launchers:
        raise UserError(f"--launcher: {launcher} cannot start {runtime} containers; allowed: "
                        + " | ".join(RUNTIMES[runtime].launchers) + " (or another --runtime)")
    if launcher == "mpirun":
        # The per-rank step binds CPUs itself, so the launcher must not.
        return ("mpirun", "--bind-to", "none", "--map-by", f"ppr:{tasks_per_node}:node")
    return ("srun", f"--mpi={site.srun_mpi}", "--cpu-bind=none", "--kill-on-bad-exit=1",
            *pyxis_flags)


def _environment(site: Site, req: Request, part: Partition) -> tuple[tuple[str, str], ...]:
    env = dict(site.environment)
    if site.socket_ifname:
        for name in ("NCCL_SOCKET_IFNAME", "OMPI_MCA_btl_tcp_if_include",
                     "OMPI_MCA_oob_tcp_if_include"):
            env.setdefault(name, site.socket_ifname)
    env.update(req.env)
    model = site.network_environment + ((HOST_LIBS_VAR, ":".join(site.host_libraries)),) \
        if site.host_libraries else site.network_environment
    ours = (SLOTS_VAR, RANK_LOG_VAR, *STAGE_VARIABLES) + ((TIMELINE_VAR,) if req.timeline else ()) \
        + tuple(name for name, _ in model)
    if any(name in env for name in ours):
        raise UserError(f"--env: {', '.join(ours)} are set by chainermn-rt; allowed: any "
                        "other variable")
    if site.metrics_textfile_dir:
        env.setdefault(METRICS_DIR_VAR, site.metrics_textfile_dir)
    env.update(model)
    # every slot of the node, however few ranks run: a rank finds its GPU's slot (Slurm may
    # give the job any of the node's GPUs), and NCCL_IB_HCA lists every HCA of the node
    env[SLOTS_VAR] = dump_slots(part.topology.slots)
    if req.per_rank_logs:
        env[RANK_LOG_VAR] = RANK_LOG_PATTERN
    return tuple(env.items())


def _sbatch(site: Site, part: Partition, req: Request, tasks_per_node: int, cpus_per_task: int,
            gpus: int) -> tuple[tuple[str, str | None], ...]:
    """The #SBATCH options: the Plan's own (sbatch_options.owned), then the profile's."""
    account, qos = req.account or site.account, req.qos or site.qos
    options: list[tuple[str, str | None]] = [
        ("job-name", req.job_name), ("partition", part.name), ("nodes", str(req.nodes)),
        ("ntasks-per-node", str(tasks_per_node)),
        ("cpus-per-task", str(cpus_per_task))]
    if gpus:
        options.append(("gpus-per-node", f"{part.gpu_type}:{gpus}" if part.gpu_type
                        else str(gpus)))
    options.append(("time", req.time))
    options += [(name, value) for name, value in (("mem", req.memory), ("account", account),
                                                  ("qos", qos), ("exclude", ",".join(req.exclude)))
                if value]
    options.append(("output", req.log))
    if site.signal:
        options.append(("signal", f"B:{site.signal}"))  # the shell's trap handles it
    if site.requeue:
        options += [("requeue", None), ("open-mode", "append")]
    own = tuple((owned(name), value) for name, value in options)
    return own + tuple({**dict(site.sbatch), **dict(part.sbatch)}.items())  # the partition's win


def make_plan(site: Site, req: Request) -> Plan:
    """Decide the job for ``req`` on ``site``; raises :class:`UserError` when it can't run there."""
    part = site.partition(req.partition)
    req = checked(req, part, site.slurm_release)
    tasks_per_node, gpus = _tasks(site, part, req)
    site.mpi.check_launch(req.launcher or site.launcher, site.srun_mpi)
    environment = _environment(site, req, part)
    stop, timeline = stop_of(site), Timeline() if req.timeline else None
    runtime, container, pyxis_flags = _container(
        site, req, part, (part.local_scratch if req.stage else None, site.metrics_textfile_dir,
                          *site.host_libraries),
        _exported(environment, stop, timeline, bool(req.stage)))
    python = req.python or (site.container.python if runtime != "none" else site.python)
    if python is None:  # bare metal, no python in the profile: the interpreter running us
        python = sys.executable
    cpus_per_task = part.cpus_per_node // len(part.topology.slots)
    return Plan(
        site_name=site.name,
        sbatch=_sbatch(site, part, req, tasks_per_node, cpus_per_task, gpus),
        modules=site.modules, environment=environment,
        launch=_launch(site, req, runtime, tasks_per_node, pyxis_flags),
        container=container, rank_step=(python, "-m", "chainermn_rt", "rank", "--"),
        command=(python, "-m", req.module, *req.command) if req.module else tuple(req.command),
        partition=part.name, nodes=req.nodes, tasks_per_node=tasks_per_node,
        cpus_per_task=cpus_per_task, gpus_per_node=gpus,
        stop=stop,
        stage=plan_stage(req.stage, part.local_scratch,
                         f"partition {part.name!r} of site {site.name!r}", req.nodes,
                         (*pyxis_flags, *container), python),
        timeline=timeline,
        runtime=runtime, image=None if runtime == "none" else req.image or site.container.image)
