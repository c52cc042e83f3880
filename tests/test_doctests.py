"""The examples in docstrings run and print what they say (``# doctest: +SKIP`` ones need a
cluster or MPI ranks and are exercised by the other tests)."""

from __future__ import annotations

import doctest
import importlib

import pytest

from conftest import REPO

# ReFrame's own Python loads chainermn_rt/reframe/checks.py (tests/test_reframe.py runs it)
NOT_IMPORTED = {REPO / "chainermn_rt" / "reframe" / "checks.py"}
MODULES = sorted(
    ".".join(p.relative_to(REPO).with_suffix("").parts)
    for top in ("chainermn_rt", "containers") for p in (REPO / top).rglob("*.py")
    if p.name != "__main__.py" and p not in NOT_IMPORTED)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, monkeypatch):
    monkeypatch.chdir(REPO)
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
