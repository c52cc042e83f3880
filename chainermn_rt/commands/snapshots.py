"""``chainermn-rt snapshots PATH``: the snapshot sets a resumable job wrote, checked.

Example::

    $ chainermn-rt snapshots result/snapshots
    iter_000000400  4 ranks  ok
    iter_000000300  4 ranks  ok
    .iter_000000500.tmp  incomplete (a write that never finished; ignored)
    $ chainermn-rt snapshots result/snapshots/iter_000000400    # one set
    iter_000000400  4 ranks  ok

PATH is a folder of sets (``OUT/snapshots``) or one set. Every rank's file is read and its
sha256 compared with the manifest. Exit status 0 when the newest set (or the one named) is
usable, 2 with one line naming the file and field when it is not; nothing is written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from chainermn_rt.errors import UserError
from chainermn_rt.snapshots import store


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="OUT/snapshots, or one set in it")


def run(args: argparse.Namespace) -> int:
    path = Path(args.path)
    try:
        return _report(path)
    except OSError as err:  # a folder that cannot be listed or read
        raise UserError(f"PATH: {err.filename or path}: {err.strerror}; allowed: OUT/snapshots "
                        "or a set in it, readable") from None


def _report(path: Path) -> int:
    if (path / store.MANIFEST).exists() or store.iteration_of(path.name) is not None:
        data = store.check_set(path)
        print(f"{path.name}  {data['world_size']} ranks  ok")
        return 0
    if not path.is_dir():
        raise UserError(f"PATH: {path} is not a folder; allowed: OUT/snapshots or a set in it")
    sets = store.complete_sets(path)
    if not sets:
        raise UserError(f"PATH: {path} holds no snapshot set (iter_NNNNNNNNN folders); allowed: "
                        "OUT/snapshots of a job that used chainermn_rt.resumable")
    newest_error = None
    for i, one in enumerate(sets):
        try:
            data = store.check_set(one)
            print(f"{one.name}  {data['world_size']} ranks  ok")
        except store.SnapshotError as err:
            print(f"{one.name}  unusable: {err}")
            newest_error = newest_error or (err if i == 0 else None)
    for tmp in sorted(path.glob(".iter_*.tmp")):
        print(f"{tmp.name}  incomplete (a write that never finished; ignored)")
    if newest_error is not None:
        raise newest_error
    return 0
