"""The stall watchdog for unmodified ChainerMN scripts: ``chainermn.create_communicator``
returns a watched communicator.

The per-rank step's ``sitecustomize`` calls :func:`install`, which adds a meta path finder
that waits for ``chainermn`` to be imported (it imports nothing itself) and then wraps its
``create_communicator`` with :func:`chainermn_rt.watchdog.watch`. Scripts that call
``chainermn_rt.setup()`` are watched by it already (a communicator is watched once).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys

MODULE = "chainermn"


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)  # once; the real finders find it
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_wrap(module):
            exec_module(module)
            wrap(module)

        spec.loader.exec_module = exec_and_wrap
        return spec


def wrap(module) -> None:
    create = module.create_communicator
    if getattr(create, "_chainermn_rt_watched", False):
        return

    @functools.wraps(create)
    def create_communicator(*args, **kwargs):
        from chainermn_rt.watchdog import watch

        return watch(create(*args, **kwargs))

    create_communicator._chainermn_rt_watched = True
    module.create_communicator = create_communicator


def install() -> bool:
    """Watch the communicators ``chainermn.create_communicator`` makes in this process."""
    if MODULE in sys.modules:
        wrap(sys.modules[MODULE])
        return True
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
    return True
