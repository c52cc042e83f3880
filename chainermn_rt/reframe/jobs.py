"""A job Plan as a ReFrame test's fields: what ReFrame's ``srun`` launcher and job script need.

>>> from chainermn_rt.plan import Request, make_plan
>>> from chainermn_rt.site import load_site
>>> plan = make_plan(load_site("slurm/sites/sandbox.toml"),
...                  Request(nodes=2, gpus_per_node=2, python="py", command=("true",)))
>>> fields = job_fields(plan)
>>> fields.launcher_options, fields.executable
(('--mpi=pmix', '--cpu-bind=none', '--kill-on-bad-exit=1'), 'py -m chainermn_rt rank -- true')
>>> fields.env_vars["CHAINERMN_RT_SLOTS"][:12]
'\\'[{"gpu":0,"'
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from chainermn_rt.errors import UserError
from chainermn_rt.plan import Plan
from chainermn_rt.quoting import sh, sh_join


@dataclass(frozen=True)
class JobFields:
    num_tasks: int
    num_tasks_per_node: int
    num_cpus_per_task: int
    gpus_per_node: int
    launcher_options: tuple[str, ...]  # after ``srun``, shell words (ReFrame writes them as
    # they are)
    executable: str  # one shell word list: container argv, rank step, command
    env_vars: dict[str, str]  # values already shell-quoted

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
        launcher_options=tuple(sh(option, "the srun options") for option in plan.launch[1:]),
        executable=sh_join([*plan.container, *plan.rank_step, *plan.command], "the command"),
        env_vars={name: sh(value, name) for name, value in plan.environment})
