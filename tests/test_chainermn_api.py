"""The whole ChainerMN API on CPU with 2 real MPI ranks, per communicator.

The rank side is tests/mpi/chainermn_api.py; it runs under ``python -W error``, so a
warning anywhere in the API (numpy 2, setuptools >= 82, Python 3.11) fails too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conftest import REPO, run_mpi

SCRIPT = "tests/mpi/chainermn_api.py"
# CPU communicators: the stock one, plus those other packages register (see pyproject.toml).
COMMUNICATORS = ["naive", "chunked"]


def _checks() -> list[str]:
    """Names of the rank-side checks (functions decorated with @check), read from the script."""
    tree = ast.parse((REPO / SCRIPT).read_text())
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef)
            and any(isinstance(d, ast.Name) and d.id == "check" for d in node.decorator_list)]


def test_rank_script_covers_the_api():
    expected = {"communicator", "objects", "datasets", "multi_node_optimizer",
                "multi_node_iterators", "multi_node_evaluator", "checkpointer",
                "multi_node_snapshot", "multi_node_batch_normalization", "collectives",
                "point_to_point"}
    assert expected <= set(_checks())


@pytest.mark.mpi
@pytest.mark.parametrize("communicator", COMMUNICATORS)
def test_chainermn_api_two_ranks(communicator, tmp_path: Path):
    proc = run_mpi(2, ["-W", "error", SCRIPT, communicator, str(tmp_path)], timeout=180)
    # Both ranks print to one pipe: lines may run together, so match pairs, not lines.
    passed = set(re.findall(r"ok (\w+) rank=(\d)", proc.stdout))
    missing = [(name, rank) for name in _checks() for rank in ("0", "1")
               if (name, rank) not in passed]
    assert not missing, f"checks that did not pass: {missing}\n{proc.stdout}"
