"""A job Plan as a ReFrame test's fields: what ReFrame's ``srun`` launcher and job script need.

>>> from chainermn_rt.job_request import Request
>>> from chainermn_rt.plan import make_plan
>>> from chainermn_rt.site import load_site
>>> plan = make_plan(load_site("slurm/sites/sandbox.toml"),
...                  Request(nodes=2, gpus_per_node=2, python="py", command=("true",)))
>>> fields = job_fields(plan)
>>> fields.time_limit                     # the partition's limit, 00:30:00
'1800s'
>>> fields.launcher_options, fields.executable
(('--mpi=pmix', '--cpu-bind=none', '--kill-on-bad-exit=1'), 'py -m chainermn_rt rank -- true')
>>> fields.env_vars["CHAINERMN_RT_SLOTS"][:12]
'\\'[{"gpu":0,"'
>>> fields.prerun_cmds[0]
'export OMPI_MCA_pml=ob1'
>>> dgx = make_plan(load_site("slurm/sites/dgx-h100.toml"), Request(nodes=2, command=("true",)))
>>> job_fields(dgx).options
('--account=ml-research', '--constraint=ndr', '--exclusive')

The Plan's other ``#SBATCH`` options (``--mem``, account, qos, the profile's ``[sbatch]``)
become the job's options; the prerun commands load its modules (as the Plan's own script,
``slurm/templates/modules.sh.j2``), then export its environment (after the modules, as there),
then run the doctor's node check where it has one (job.sh.j2's): a check runs what ``submit``
runs.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from chainermn_rt.errors import UserError
from chainermn_rt.plan import Plan
from chainermn_rt.quoting import directive, sh, sh_join, sh_word
from chainermn_rt.render import render
from chainermn_rt.sbatch_options import SHAPE_OPTIONS, STOP_OPTIONS
from chainermn_rt.slurm_rules import parse_time

# The Plan's #SBATCH options ReFrame writes itself, from the fields below, the partition's
# access and the check's time limit; its checks are never requeued, so no stop options.
REFRAME_WRITES = frozenset(SHAPE_OPTIONS + STOP_OPTIONS)


@dataclass(frozen=True)
class JobFields:
    num_tasks: int
    num_tasks_per_node: int
    num_cpus_per_task: int
    gpus_per_node: int
    time_limit: str  # the Plan's, in ReFrame's form ("600s")
    launcher_options: tuple[str, ...]  # after ``srun``, shell words (ReFrame writes them as
    # they are)
    executable: str  # one shell word list: container argv, rank step, command
    env_vars: dict[str, str]  # values already shell-quoted
    options: tuple[str, ...]  # #SBATCH options, values quoted as the job script's own
    modules: tuple[str, ...]  # shell lines: the Plan's modules loaded
    node_check: tuple[str, ...] = ()  # the doctor's bare step before the ranks' (pyxis)

    @property
    def prerun_cmds(self) -> tuple[str, ...]:
        return (*self.modules, *(f"export {name}={value}"
                                 for name, value in self.env_vars.items()), *self.node_check)

    def argv(self) -> list[str]:
        """The step's srun line as argv, as the job script runs it."""
        return ["srun", *shlex.split(" ".join(self.launcher_options)),
                *shlex.split(self.executable)]


def job_fields(plan: Plan) -> JobFields:
    if plan.launch[0] != "srun":
        raise UserError(f"launcher: {plan.launch[0]}; allowed: srun (the checks run under "
                        "ReFrame's srun launcher)")
    return JobFields(
        num_tasks=plan.world_size, num_tasks_per_node=plan.tasks_per_node,
        num_cpus_per_task=plan.cpus_per_task, gpus_per_node=plan.gpus_per_node,
        time_limit=f"{parse_time(dict(plan.sbatch)['time'], 'time')}s",
        launcher_options=tuple(sh_word(option, "the srun options") for option in plan.launch[1:]),
        executable=sh_join([*plan.container, *plan.rank_step, *plan.command], "the command"),
        env_vars={name: sh(value, name) for name, value in plan.environment},
        options=tuple(f"--{key}" if value is None else f"--{key}={directive(value)}"
                      for key, value in plan.sbatch if key not in REFRAME_WRITES),
        modules=tuple(render(plan, "modules.sh.j2").splitlines()) if plan.modules else (),
        node_check=(f"{sh_join(plan.node_check.argv)} > {sh(plan.node_check.output)} || true",)
        if plan.node_check else ())
