"""The non-root default user of the image (Docker; Singularity runs as the caller).

USER is numeric so that hosts without the name resolve it (hadolint DL3066).

Example::

    >>> print(block("rt", 1000).runtime[0].commands[0])
    useradd --create-home --uid 1000 --shell /bin/bash rt
"""

from __future__ import annotations

from containers.recipe import Block, Run, User, Workdir


def block(name: str, uid: int) -> Block:
    return Block("user", runtime=(Run((f"useradd --create-home --uid {uid} --shell /bin/bash "
                                       f"{name}",)),
                                  User(f"{uid}:{uid}"), Workdir(f"/home/{name}")))
