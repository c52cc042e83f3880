"""Run programs only as far as their arguments: for tests/test_docs_commands.py.

stdin: a JSON list of argv lists, each ``["chainermn-rt", ...]``, ``["python", "-m", MODULE,
...]`` or ``["python", FILE, ...]`` (FILE a path in the checkout). Each program runs until its
argparse parser accepts its arguments (it stops there, before any work) or refuses them.
stdout: one JSON object per argv, ``{"ok": bool, "said": "..."}`` (what it printed when not ok).
A program that does not parse arguments with argparse is not run (its source is read first).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import runpy
import sys
from pathlib import Path

import mpi4py

mpi4py.rc.initialize = False  # a benchmark importing mpi4py.MPI starts no MPI here
mpi4py.rc.finalize = False
REPO = Path(__file__).resolve().parents[2]


class Parsed(Exception):
    """The program's parser accepted its arguments."""


def _stop_after_parsing(self, args=None, namespace=None):
    _parse_args(self, args, namespace)  # SystemExit(2) with argparse's message when refused
    raise Parsed


_parse_args = argparse.ArgumentParser.parse_args
argparse.ArgumentParser.parse_args = _stop_after_parsing


def _source(argv: list[str]) -> Path | None:
    if argv[0] == "chainermn-rt":
        return None
    if argv[1] == "-m":
        spec = importlib.util.find_spec(argv[2])
        return Path(spec.origin) if spec and spec.origin else None
    return Path(argv[1])


def _run(argv: list[str]) -> None:
    if argv[0] == "chainermn-rt":
        from chainermn_rt.cli import main

        sys.argv = argv
        sys.exit(main(argv[1:]))
    # sys.path[0] as Python sets it: the current folder (the checkout) for `python -m`, the
    # script's folder for `python FILE`, where `import bench` fails
    sys.path[0] = str(REPO if argv[1] == "-m" else Path(argv[1]).parent)
    source = _source(argv)
    if source is None or not source.is_file():
        raise FileNotFoundError(f"{argv[2] if argv[1] == '-m' else argv[1]}: no such program")
    if "parse_args" not in source.read_text():
        raise Parsed  # takes no arguments: nothing to check before it would run
    if argv[1] == "-m":
        sys.argv = [str(source), *argv[3:]]
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv[1:]
        runpy.run_path(str(source), run_name="__main__")


def _forget_the_checkouts_modules() -> None:
    """Each check imports the checkout's modules afresh (not the installed ones: chainermn_rt,
    the venv's)."""
    installed = (str(REPO / "chainermn_rt") + "/", str(REPO / ".venv") + "/")
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None) or ""
        if where.startswith(str(REPO) + "/") and not where.startswith(installed):
            del sys.modules[name]


def check(argv: list[str]) -> dict:
    said = io.StringIO()
    _forget_the_checkouts_modules()
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            _run(argv)
        return {"ok": False, "said": "ran to its end without parsing its arguments"}
    except Parsed:
        return {"ok": True, "said": ""}
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else 1
        return {"ok": code == 0, "said": said.getvalue().strip()[-2000:]}
    except Exception as err:  # noqa: BLE001 - the program could not even start
        return {"ok": False, "said": f"{type(err).__name__}: {err}"}


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))  # replaced for each program by what Python would put there
    for argv in json.load(sys.stdin):
        print(json.dumps(check(argv)), flush=True)
