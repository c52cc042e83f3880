"""A file of hosts to keep a job off: written by ``doctor --exclude-bad`` (the nodes a failed
check blames) and by a job with ``--timeline`` (its slow node), read by ``--exclude-from``
(``render``, ``submit``, ``doctor --site``, ``scaling``), which gives it to ``#SBATCH --exclude``.

The form: Slurm node names separated by commas (one line; blanks and newlines between names
are accepted too), or an empty file when there are none.

>>> text(["node2", "node10"]), text([])
('node2,node10\\n', '')
>>> parse("node2,node10\\n", "f"), parse("", "f")
(('node2', 'node10'), ())
>>> parse("node2;rm", "hosts.txt")  # doctest: +ELLIPSIS
Traceback (most recent call last):
chainermn_rt.errors.UserError: --exclude-from: hosts.txt: 'node2;rm' is not a node name; ...
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from chainermn_rt.errors import UserError, message_value
from chainermn_rt.files import read_small

MAX_BYTES = 1 << 20
# a node name, or a Slurm host range such as node[1-4,7]
NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[0-9,-]+\][A-Za-z0-9._-]*)*\Z")


def text(hosts: Iterable[str]) -> str:
    """The file's text for ``hosts``: one comma-separated line, or "" when there are none."""
    hosts = list(hosts)
    return ",".join(hosts) + "\n" if hosts else ""


def parse(content: str, where: str) -> tuple[str, ...]:
    """The node names of a file's ``content``; UserError naming ``where`` for anything else."""
    names = tuple(n for n in re.split(r"[,\s]+", content) if n)
    for name in names:
        if not NODE.match(name):
            raise UserError(f"--exclude-from: {where}: {message_value(name, quote=True)} is not a "
                            "node name; allowed: Slurm node names separated by commas, as "
                            "`doctor --exclude-bad` and a --timeline job's slow-nodes.txt write")
    return names


def read(path: str | Path) -> tuple[str, ...]:
    """The node names in the file ``path`` (UserError naming it when it cannot be read)."""
    try:
        data = read_small(Path(path), MAX_BYTES, follow_links=True)
    except (OSError, ValueError) as err:
        reason = err.strerror.lower() if isinstance(err, OSError) and err.strerror else str(err)
        raise UserError(f"--exclude-from: {message_value(str(path))}: {reason}; allowed: a "
                        "readable file of node names") from None
    return parse(data.decode("utf-8", errors="replace"), message_value(str(path)))
