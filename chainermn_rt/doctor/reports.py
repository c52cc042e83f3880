"""The files a doctor job leaves in its folder, written by probe.py and read by job.py.

- ``rank-<N>.json``: one rank's own report (N: the launcher's rank), written before MPI starts
  and again once it runs, so it is there even when the ranks never form one MPI world;
- ``ranks.json``: every rank's report, gathered by MPI rank 0 after the collective tests
  (allreduce, bandwidth); only when MPI joined the ranks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from chainermn_rt.files import read_small, write_atomically

GATHERED = "ranks.json"
_RANK_FILE = re.compile(r"rank-(\d+)\.json\Z")


def rank_file(out: Path, rank: int) -> Path:
    return out / f"rank-{rank}.json"


def write_json(path: Path, data) -> None:
    """Never half-written: the collector may read it while the job runs."""
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    write_atomically(path, lambda f: f.write(text))


def rank_files(out: Path) -> list[Path]:
    """Every ``rank-<N>.json`` in ``out``, in rank order."""
    found = sorted((int(m.group(1)), p) for p in out.iterdir()
                   if (m := _RANK_FILE.match(p.name)))
    return [p for _, p in found]


def load_reports(out: Path) -> tuple[list[dict], bool]:
    """(the rank reports, whether MPI gathered them): ``ranks.json`` when rank 0 wrote it, else
    every ``rank-<N>.json``. A file that is damaged (not JSON, too large, not a regular file:
    the job's folder is on a shared file system) counts as not written: the checks then name
    the ranks that did not report."""
    gathered = _load(out / GATHERED, MAX_GATHERED_BYTES)
    if isinstance(gathered, list) and all(isinstance(r, dict) for r in gathered):
        return gathered, True
    found = (_load(p, MAX_RANK_BYTES) for p in rank_files(out))
    return [r for r in found if isinstance(r, dict)], False


MAX_RANK_BYTES = 1 << 20  # a rank's report is a few KB
MAX_GATHERED_BYTES = 1 << 30


def _load(path: Path, limit: int):
    """The JSON in ``path``, or None when it is missing or damaged."""
    try:
        return json.loads(read_small(path, limit))
    except (OSError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
