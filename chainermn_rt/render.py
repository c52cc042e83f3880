"""Render a Plan into an sbatch script with the Jinja2 templates in slurm/templates/.

Templates format; they decide nothing. Undefined values are errors (StrictUndefined), and
every value reaches the shell through a quoting filter of :mod:`chainermn_rt.quoting`:

- ``sh``: one shell word; ``shjoin``: an argv as shell words; ``shfill``: one shell word whose
  ``{name}`` fields expand to the shell's ``$name`` (the stop verdicts' messages);
- ``directive``: one ``#SBATCH`` value, quoted the way sbatch reads its directives.
"""

from __future__ import annotations

import jinja2

from chainermn_rt.plan import Plan
from chainermn_rt.quoting import directive, sh, sh_fill, sh_join
from chainermn_rt.site import data_dir

TEMPLATE = "job.sh.j2"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir() / "templates")),
        undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True,
        trim_blocks=True, lstrip_blocks=True)
    env.filters.update(sh=lambda value: sh(value, "the job script"),
                       shjoin=lambda argv: sh_join(argv, "the job script's command"),
                       shfill=lambda text: sh_fill(text, "the job script's stop messages"),
                       directive=directive)
    return env


def render(plan: Plan, template: str = TEMPLATE) -> str:
    """The sbatch script for ``plan``."""
    return environment().get_template(template).render(plan=plan)
