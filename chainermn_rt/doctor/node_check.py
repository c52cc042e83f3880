"""The doctor's node check: where the ranks' runtime runs enroot (pyxis), a bare step before
the ranks' on every node of the job asks enroot whether it can run there
(:mod:`chainermn_rt.runtimes.enroot_probe`, as ``site check --live`` does). Where it cannot,
pyxis fails the container step with an error per task, and its log names no node (slurmstepd's
lines carry the node's name only in a Slurm built for several slurmd on one host): the doctor
says one line per such node instead, in the words of the site check.

>>> from chainermn_rt.plan import Plan
>>> plan = Plan("s", (), (), (), (), (), (), (), "cpu", 2, 2, 1, 0, runtime="pyxis")
>>> with_check(plan, Path("/d")).node_check.argv[:3], with_check(plan, Path("/d")).node_check.output
(('srun', '--nodes=2', '--ntasks=2'), '/d/enroot-nodes.txt')
>>> with_check(replace(plan, runtime="apptainer"), Path("/d")).node_check is None
True
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from chainermn_rt.files import read_small
from chainermn_rt.plan import NodeCheck, Plan
from chainermn_rt.runtimes import RUNTIMES, enroot_probe
from chainermn_rt.slurm_rules import one_per_node

FILE = "enroot-nodes.txt"  # in the doctor's folder
MAX_BYTES = 64 << 20


def with_check(plan: Plan, out: Path) -> Plan:
    """``plan`` with the node check where its runtime runs enroot."""
    if RUNTIMES[plan.runtime].command != "enroot":
        return plan
    argv = (*one_per_node(plan.nodes), "--label", "sh", "-c", enroot_probe.NODE_SCRIPT)
    return replace(plan, node_check=NodeCheck(argv, str(out / FILE)))


def broken(out: Path) -> dict[str, str]:
    """Each node whose enroot cannot run, as the node check wrote it in ``out``, and its line;
    none where it wrote nothing readable (the job's table tells the rest). A node whose enroot the
    task's PATH does not find is left out: slurmstepd's own PATH, which pyxis uses, may find it
    (its environment is the user's to read only as root)."""
    try:
        reports = enroot_probe.by_node(read_small(out / FILE, MAX_BYTES).decode(errors="replace"))
    except (OSError, ValueError):
        return {}
    return {node: enroot_probe.cannot_run(node, r) for node, r in sorted(reports.items())
            if r.problems and r.command is not None}
