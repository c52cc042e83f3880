"""What every doctor check returns, and the words for its outcome.

The stack check (``stack.py``: this machine or an image) and the cluster check (``cluster.py``:
the ranks of a doctor job) report the same way: PASS, FAIL or n/a (does not apply here; never
counted as passed, never a failure), one line of reason, for a failure one line of hint, and
the nodes at fault (``--exclude-bad``; a check of the job as a whole names none).

>>> print(format_line(Check("mpi", PASS, "Open MPI 4.1.4")))
PASS  mpi            Open MPI 4.1.4
>>> failed([Check("a", PASS, ""), Check("b", FAIL, "")])
['b']
"""

from __future__ import annotations

from dataclasses import dataclass

PASS, FAIL, NA = "PASS", "FAIL", "n/a"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    reason: str
    hint: str = ""
    nodes: tuple[str, ...] = ()  # the nodes at fault


def format_line(check: Check) -> str:
    """One line of the stack check's report."""
    return f"{check.status:<5} {check.name:<14} {check.reason}"


def failed(checks: list[Check]) -> list[str]:
    """The names of the checks that failed."""
    return [c.name for c in checks if c.status == FAIL]
