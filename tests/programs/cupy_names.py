"""Which names of CuPy the given source folders use that this CuPy does not have.

    python cupy_names.py FOLDER...

Reads every ``*.py`` under the folders (tests and testing helpers left out) and collects
``cupy.a.b`` / ``cupyx.a`` chains: plain attributes, ``from cupy.x import y``, and chains
reached through a module's ``cupy`` (``cuda.cupy.ElementwiseKernel``). Each chain is
resolved against the installed CuPy (attributes, else submodule imports; no GPU needed).
Prints one JSON object: ``{"cupy": version, "chains": n, "missing": {chain: [files]},
"unloaded": [chain]}`` (unloaded: there, but loading needs CUDA's libraries).
"""

from __future__ import annotations

import ast
import importlib
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOTS = ("cupy", "cupyx")


def _parts(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    parts.reverse()
    starts = [i for i, part in enumerate(parts[:-1]) if part in ROOTS]
    return parts[starts[0]:] if starts else None


def chains(folder: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(folder.rglob("*.py")):
        if {"tests", "testing"} & set(path.relative_to(folder).parts):
            continue
        name = str(path.relative_to(folder.parent))
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.Attribute) and (parts := _parts(node)):
                found[".".join(parts)].add(name)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ROOTS:
                for alias in node.names:
                    found[f"{node.module}.{alias.name}"].add(name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in ROOTS:
                        found[alias.name].add(name)
    return found


def resolve(chain: str) -> str:
    """``found``, ``missing``, or ``unloaded`` (the name is there but loading it needs CUDA's
    libraries, as CuPy's lazily bound cuBLAS does without them)."""
    parts = chain.split(".")
    here = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=2):
        try:
            here = getattr(here, part)
            continue
        except AttributeError:
            pass
        except Exception:  # noqa: BLE001 - CuPy's loaders raise their own errors
            return "unloaded"
        try:
            here = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            return "missing"
    return "found"


def main(folders: list[str]) -> None:
    import cupy

    found: dict[str, set[str]] = defaultdict(set)
    for folder in folders:
        for chain, files in chains(Path(folder)).items():
            found[chain] |= files
    status = {chain: resolve(chain) for chain in sorted(found)}
    print(json.dumps({
        "cupy": cupy.__version__, "chains": len(found),
        "missing": {c: sorted(found[c]) for c, s in status.items() if s == "missing"},
        "unloaded": [c for c, s in status.items() if s == "unloaded"]}))


if __name__ == "__main__":
    main(sys.argv[1:])
