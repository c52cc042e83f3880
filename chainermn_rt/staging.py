"""Where a rank finds data its job staged to node-local storage (``render --stage PATH``).

The job script copies each staged folder to every node before the ranks start (copy i at
``$CHAINERMN_RT_STAGE_DIR/<i>``) and says which folders it staged in
``$CHAINERMN_RT_STAGE_FROM``. A program keeps naming the shared path and reads the local copy:

>>> env = {"CHAINERMN_RT_STAGE_DIR": "/tmp/chainermn-rt-stage-7",
...        "CHAINERMN_RT_STAGE_FROM": '["/lustre/shards/train", "/lustre/shards/val"]'}
>>> local_path("/lustre/shards/val", env)
'/tmp/chainermn-rt-stage-7/1'
>>> local_path("/lustre/shards/train/shard-000003.tar", env)
'/tmp/chainermn-rt-stage-7/0/shard-000003.tar'
>>> local_path("/lustre/shards/train2", env), local_path("/lustre/other", {})
('/lustre/shards/train2', '/lustre/other')
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Mapping

from chainermn_rt.errors import UserError
from chainermn_rt.rank_contract import STAGE_DIR_VAR, STAGE_FROM_VAR


def staged(environ: Mapping[str, str] | None = None) -> tuple[str, tuple[str, ...]] | None:
    """(the node-local folder, the staged folders in order) of this job; None when it staged
    nothing. A malformed value is a UserError naming the variable.

    >>> staged({"CHAINERMN_RT_STAGE_DIR": "/s/x", "CHAINERMN_RT_STAGE_FROM": '["/a"]'})
    ('/s/x', ('/a',))
    >>> staged({"CHAINERMN_RT_STAGE_DIR": "/s/x", "CHAINERMN_RT_STAGE_FROM": '"/a"'})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    chainermn_rt.errors.UserError: CHAINERMN_RT_STAGE_FROM: '"/a"'; allowed: a JSON list of ...
    """
    env = os.environ if environ is None else environ
    folder, text = env.get(STAGE_DIR_VAR, ""), env.get(STAGE_FROM_VAR, "")
    if not folder and not text:
        return None
    try:
        sources = json.loads(text)
    except ValueError:
        sources = None
    if not isinstance(sources, list) or not all(
            isinstance(s, str) and s.startswith("/") for s in sources):
        raise UserError(f"{STAGE_FROM_VAR}: {text[:200]!r}; allowed: a JSON list of absolute "
                        "paths, as the job script writes it")
    if not folder.startswith("/"):
        raise UserError(f"{STAGE_DIR_VAR}: {folder[:200]!r}; allowed: an absolute path, as the "
                        "job script writes it")
    return folder, tuple(posixpath.normpath(s) for s in sources)


def local_path(path: str, environ: Mapping[str, str] | None = None) -> str:
    """The node-local copy of ``path`` when it is a staged folder or lies below one (the
    longest staged folder wins), else ``path`` unchanged. Paths compare as text after
    normalising (``a//b/``, ``a/./b``); relative paths are taken from the current folder;
    symbolic links are not followed."""
    job = staged(environ)
    if job is None:
        return path
    folder, sources = job
    full = posixpath.normpath(path if path.startswith("/") else posixpath.join(os.getcwd(), path))
    best = None
    for i, source in enumerate(sources):
        if full == source or full.startswith(source.rstrip("/") + "/"):
            if best is None or len(source) > len(sources[best]):
                best = i
    if best is None:
        return path
    rest = full[len(sources[best]):].lstrip("/")
    return posixpath.join(folder, str(best), rest) if rest else posixpath.join(folder, str(best))
