"""Chainer 7.8.1 on today's stack: the fix set (``chainer_fixes``), the builder (``build_chainer``).

Nothing here is imported at run time: the fixes live in the patched chainer wheel that
``make setup`` builds and installs. :func:`patched_build` tells whether it is installed.

Example::

    >>> from chainermn_rt.compat import patched_build
    >>> patched_build()  # doctest: +SKIP
    '7.8.1+rt84584d59'
"""

from __future__ import annotations

import importlib.util


def patched_build() -> str | None:
    """The patched chainer build installed here (e.g. ``'7.8.1+rt84584d59'``), or None.

    Reads the marker module without importing chainer itself.
    """
    try:
        spec = importlib.util.find_spec("chainer._chainermn_rt_fixes")
    except ImportError:  # chainer itself not installed
        return None
    if spec is None or spec.loader is None:
        return None
    namespace: dict = {}
    exec(spec.loader.get_source(spec.name), namespace)  # noqa: S102 - our own marker module
    return namespace.get("BUILD")
