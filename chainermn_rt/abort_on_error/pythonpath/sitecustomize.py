"""Run by every Python process of a rank: ``chainermn-rt rank`` puts this folder first on
PYTHONPATH. Installs chainermn_rt.abort_on_error's hook, bounds MPI's start-up
(chainermn_rt.watchdog.startup), watches the communicators chainermn makes
(chainermn_rt.watchdog.autowatch), then runs the sitecustomize that this one hides (the next on
sys.path), if any."""

import importlib
import importlib.machinery
import importlib.util
import os
import sys

hidden = None  # the sitecustomize this one hides, once run



def _guard(module: str, name: str, what: str) -> None:
    try:
        getattr(importlib.import_module(module), name)()
    except Exception as err:  # noqa: BLE001 - never stop the interpreter from starting
        if getattr(err, "name", None) != "chainermn_rt":  # else: a Python without chainermn_rt
            print(f"chainermn-rt: warning: {what} not installed: {err}", file=sys.stderr)


def _install() -> None:
    _guard("chainermn_rt.abort_on_error", "install", "abort-on-error hook")
    _guard("chainermn_rt.watchdog.startup", "arm", "MPI start-up limit")
    _guard("chainermn_rt.watchdog.autowatch", "install", "stall watchdog")


def _run_hidden() -> None:
    global hidden
    here = os.path.realpath(os.path.dirname(__file__))
    mine = [i for i, p in enumerate(sys.path) if os.path.realpath(p or ".") == here]
    after = [p for p in sys.path[mine[0] + 1 if mine else 0:]
             if os.path.realpath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", after)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        hidden = module
        spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # not when a tool imports this file under another name
    _install()
    _run_hidden()
