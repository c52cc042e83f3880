"""The enroot step of ``site check --live`` and of the doctor, read (enroot_probe.by_node):
srun --label's lines, each task's node and enroot's answer; anything else a node prints is
refused, not believed."""

from __future__ import annotations

import pytest

from chainermn_rt.runtimes.enroot_probe import MARK, by_node


def _task(i: int, node: str, run: str = "") -> str:
    lines = [f"{MARK}node", node, f"{MARK}enroot-command", "/usr/bin/enroot",
             f"{MARK}enroot-run", *([run] if run else [])]
    return "\n".join(f"{i}: {line}" for line in lines)


def test_each_nodes_problems_are_its_own():
    found = by_node(_task(0, "node1") + "\n" + _task(1, "node2", "no enroot on PATH (/bin)"))
    assert {n: r.problems for n, r in found.items()} == {
        "node1": (), "node2": ("no enroot on PATH (/bin)",)}


@pytest.mark.parametrize("text, said", [
    ("node1 says hello", "allowed: srun --label's lines"),
    (_task(0, "node 1; rm"), "a task named no node"),
    (_task(0, "node1").replace("/usr/bin/enroot", "enroot\x1b[2J"), "allowed: a command's path"),
])
def test_what_a_node_prints_is_checked(text, said):
    with pytest.raises(ValueError, match=said):
        by_node(text)
