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

from chainermn_rt.files import write_atomically

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
    every ``rank-<N>.json``."""
    gathered = out / GATHERED
    if gathered.exists():
        return json.loads(gathered.read_text()), True
    return [json.loads(p.read_text()) for p in rank_files(out)], False
