"""Render a Plan into an sbatch script with the Jinja2 templates in slurm/templates/.

Templates format; they decide nothing. Undefined values are errors (StrictUndefined), and
every value reaches the shell through a quoting filter:

- ``sh``: one shell word (``shlex.quote``); ``shjoin``: an argv as shell words (``shlex.join``);
- ``directive``: one ``#SBATCH`` value, quoted the way sbatch reads its directives.

>>> directive('my "big" run #1')
'"my \\\\"big\\\\" run \\\\#1"'
"""

from __future__ import annotations

import re
import shlex

import jinja2

from chainermn_rt.plan import Plan
from chainermn_rt.site import data_dir

TEMPLATE = "job.sh.j2"
_PLAIN = re.compile(r"[A-Za-z0-9_.,:@%/=+-]+\Z")


def directive(value: str) -> str:
    """Quote a ``#SBATCH`` value: sbatch splits on blanks, honours ``"`` and ``\\``, and treats an
    unescaped ``#`` as the start of a comment. Control characters never get here (the Plan
    refuses them).
    """
    if _PLAIN.match(value):
        return value
    return '"' + re.sub(r'([\\"#])', r"\\\1", value) + '"'


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir() / "templates")),
        undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True,
        trim_blocks=True, lstrip_blocks=True)
    env.filters.update(sh=shlex.quote, shjoin=shlex.join, directive=directive)
    return env


def render(plan: Plan, template: str = TEMPLATE) -> str:
    """The sbatch script for ``plan``."""
    return environment().get_template(template).render(plan=plan)
