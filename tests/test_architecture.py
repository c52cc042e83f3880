"""docs/architecture.md's floors are the package's imports: every module of chainermn_rt has a
floor there, imports only from floors below its own, and no command imports another."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "chainermn_rt"
# what the package's face defines itself (it imports nothing): any floor may import it
FACE_OWN = {"version"}


def documented_floors() -> dict[str, int]:
    """``{"plan.py": 4, "doctor/": 3, ...}`` from the numbered list under "Floors"."""
    text = (REPO / "docs/architecture.md").read_text()
    block = text[text.index("Floors, top to bottom"):text.index("`compat/`")]
    floors = {}
    for number, body in re.findall(r"^(\d)\. (.*?)(?=^\d\. |\Z)", block, re.S | re.M):
        while re.search(r"\([^()]*\)", body):  # what parentheses say is not a floor's member
            body = re.sub(r"\([^()]*\)", "", body)
        for name in re.findall(r"`([a-z_]+(?:\.py|/))`", body):
            floors[name] = int(number)
    return floors


def unit_of(path: Path) -> str:
    """A module's floor entry: its top folder below chainermn_rt (``doctor/``), or its file."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] + "/" if len(parts) > 1 else parts[0]


def imported_units(path: Path) -> set[str]:
    """The floor entries ``path`` imports (anywhere in it, functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names
                     if node.module != "chainermn_rt" or a.name not in FACE_OWN]
            modules = names if node.module == "chainermn_rt" else [node.module, *names]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] != "chainermn_rt":
                continue
            if len(parts) == 1:
                found.add("__init__.py")
                continue
            top = PACKAGE / parts[1]
            if top.is_dir():
                found.add(parts[1] + "/")
            elif top.with_suffix(".py").exists():
                found.add(parts[1] + ".py")
            else:  # a name the package's face hands on
                found.add("__init__.py")
    return found


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if unit_of(p) != "compat/")


def test_every_module_has_a_floor():
    floors = documented_floors()
    assert sorted({unit_of(p) for p in modules()} - set(floors)) == []
    assert sorted(set(floors) - {unit_of(p) for p in modules()} - {"bench/"}) == []


def test_each_module_imports_only_from_floors_below():
    floors = documented_floors()
    upward = []
    for path in modules():
        me = unit_of(path)
        for other in imported_units(path) - {me}:
            if floors[other] <= floors[me]:
                upward.append(f"{path.relative_to(REPO)} (floor {floors[me]}) imports {other} "
                              f"(floor {floors[other]})")
    assert upward == []


def test_the_benchmark_scripts_import_only_from_floors_below_theirs():
    floors = documented_floors()
    upward = [f"{path.relative_to(REPO)} imports {other} (floor {floors[other]})"
              for path in sorted((REPO / "bench").glob("*.py"))
              for other in imported_units(path) if floors[other] <= floors["bench/"]]
    assert upward == []


def test_no_command_imports_another():
    commands = PACKAGE / "commands"
    crossing = []
    for path in sorted(commands.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.startswith("chainermn_rt.commands"):
                crossing.append(f"{path.name}: from {node.module} import ...")
    assert crossing == []


def test_the_floor_list_is_read():
    """The parser above sees the list as written (a change of its form fails here, not
    silently in the tests above)."""
    floors = documented_floors()
    assert (floors["commands/"], floors["plan.py"], floors["errors.py"]) == (1, 4, 9)
    assert max(floors.values()) == 9 and len(floors) > 30
