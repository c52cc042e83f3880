"""What ``chainermn-rt doctor --site`` prints and writes: the table of checks, the exclude list.

>>> from chainermn_rt.doctor.check import Check
>>> print(format_table([Check("versions", "PASS", "the same on every rank"),
...                     Check("gpu-per-rank", "FAIL", "node2: ranks 2, 3 all use GPU 0",
...                           "one rank per GPU", ("node2",))]), end="")
check         status  reason
versions      PASS    the same on every rank
gpu-per-rank  FAIL    node2: ranks 2, 3 all use GPU 0
                      hint: one rank per GPU
>>> exclude_text([Check("x", "FAIL", "", "", ("node2", "node10"))])
'node2,node10\\n'
"""

from __future__ import annotations

from chainermn_rt import host_list
from chainermn_rt.doctor.check import FAIL, Check
from chainermn_rt.doctor.cluster import failed_nodes


def format_table(checks: list[Check]) -> str:
    """One row per check; a failed check's hint on the line below it."""
    w = max([len("check")] + [len(c.name) for c in checks])
    lines = [f"{'check':<{w}}  status  reason"]
    for c in checks:
        lines.append(f"{c.name:<{w}}  {c.status:<6}  {c.reason}")
        if c.status == FAIL and c.hint:
            lines.append(f"{'':<{w}}  {'':<6}  hint: {c.hint}")
    return "\n".join(lines) + "\n"


def exclude_text(checks: list[Check]) -> str:
    """The nodes a failed check blames, as the host list file ``--exclude-from`` reads."""
    return host_list.text(failed_nodes(checks))
