"""Which MPI worlds a doctor job's ranks formed, and the words for them.

Every rank's report names its world (``mpi.world``): the identity of the world's MPI rank 0
(host, pid, launcher rank), which the probe broadcasts over ``MPI_COMM_WORLD``, so the members
of one world name the same one and a rank alone in its world (a singleton: its MPI never
reached the launcher's PMI) names itself.

>>> def rep(rank, root, size):
...     return {"launcher": {"rank": rank},
...             "mpi": {"size": size, "world": {"host": "n1", "pid": root, "rank": root}}}
>>> found = worlds([rep(0, 0, 2), rep(1, 0, 2), rep(2, 2, 1), rep(3, 3, 1)])
>>> [[r["launcher"]["rank"] for r in w] for w in found]
[[0, 1], [2], [3]]
>>> describe(found, 4)
'4 ranks started as 3 MPI worlds (1 world of 2: ranks 0, 1; 2 one-rank worlds: ranks 2, 3; \
expected one world of 4)'
>>> describe(found[1:], 4)
'ranks 2, 3 started as 2 one-rank worlds (MPI_COMM_WORLD size 1 each; expected one world of 4)'
>>> span([0, 1, 2, 3, 7, 9, 10])
'0-3, 7, 9, 10'
"""

from __future__ import annotations

import os
import socket

Reports = list[dict]


def identity(launcher_rank: int) -> dict:
    """This process as its world's rank 0 names it (the probe broadcasts rank 0's)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "rank": launcher_rank}


def _rank(r: dict) -> int:
    return r["launcher"]["rank"]


def key(r: dict, named: bool = True) -> tuple:
    """The world of a report with MPI's side: its name where ``named``; else a one-rank world
    is its own and a larger one is told apart by its size only."""
    if named:
        world = r["mpi"]["world"]
        return ("root", world["host"], world["pid"])
    if r["mpi"]["size"] == 1:
        return ("alone", _rank(r))
    return ("size", r["mpi"]["size"])


def worlds(reports: Reports) -> list[Reports]:
    """The reports with MPI's side grouped by world: each in rank order, largest world first,
    then by lowest rank. By the worlds' names only where every report has one (a rank that
    stopped before the broadcast, or an older probe, has none)."""
    named = all(r["mpi"].get("world") for r in reports)
    found: dict[tuple, Reports] = {}
    for r in sorted(reports, key=_rank):
        found.setdefault(key(r, named), []).append(r)
    return sorted(found.values(), key=lambda w: (-size(w), _rank(w[0])))


def size(world: Reports) -> int:
    """A world's size as MPI says it (its members that reported may be fewer)."""
    return world[0]["mpi"]["size"]


def span(ranks: list[int]) -> str:
    """Ranks with runs of three or more shortened: ``0-3, 7, 9, 10``."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(f"{a}-{b}" if b - a > 1 else ", ".join(map(str, range(a, b + 1)))
                     for a, b in runs)


def _ranks(w: Reports) -> str:
    return ("rank " if len(w) == 1 else "ranks ") + span([_rank(r) for r in w])


def describe(found: list[Reports], launched: int) -> str:
    """How the ranks of ``found`` (:func:`worlds`) started, against one world of
    ``launched``: ``4 ranks started as 4 one-rank worlds (MPI_COMM_WORLD size 1 each;
    expected one world of 4)``; ``rank 7 started as ...`` where some ranks are not in
    ``found``."""
    n = sum(len(w) for w in found)
    # all of them: how many; some (the others never got through MPI_Init): which
    who = f"{n} ranks" if n >= launched else _ranks([r for w in found for r in w])
    ranks = f"{who} started as"
    if all(size(w) == 1 for w in found):
        worlds_ = "a one-rank world" if n == 1 else f"{n} one-rank worlds"
        each = "" if n == 1 else " each"
        return (f"{ranks} {worlds_} (MPI_COMM_WORLD size 1{each}; expected one world of "
                f"{launched})")
    parts = []
    for n_ in sorted({size(w) for w in found}, reverse=True):
        these = [w for w in found if size(w) == n_]
        if n_ == 1:
            parts.append(f"{len(these)} one-rank world{'s' if len(these) > 1 else ''}: "
                         + _ranks([w[0] for w in these]))
        else:
            parts.append(f"{len(these)} world{'s' if len(these) > 1 else ''} of {n_}: "
                         + ", ".join(_ranks(w) for w in these))
    return (f"{ranks} {len(found)} MPI world{'s' if len(found) > 1 else ''} "
            f"({'; '.join(parts)}; expected one world of {launched})")
