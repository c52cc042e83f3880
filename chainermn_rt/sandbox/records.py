"""Finished jobs as Slurm records them in the job completion file (``JobCompType=jobcomp/filetxt``).

One line per finished job, ``Key=value`` pairs separated by spaces (values such as ``Name``
and ``WorkDir`` may hold spaces themselves):

>>> rec = record("JobId=7 UserId=root(0) Name=my job JobState=TIMEOUT ExitCode=0:15")
>>> rec["Name"], result(rec)
('my job', FinalState(state='TIMEOUT', exit_code=0))
"""

from __future__ import annotations

from pathlib import Path

from chainermn_rt.slurm_client import FinalState, final_state
from chainermn_rt.slurm_records import record


def read_records(path: Path) -> dict[str, dict[str, str]]:
    """Job id -> its record; a later line for the same id (a requeued job) wins."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return {}
    records = {}
    for line in text.splitlines():
        rec = record(line) if line.startswith("JobId=") else {}
        if rec.get("JobId", "").isdigit():
            records[rec["JobId"]] = rec
    return records


def result(rec: dict[str, str]) -> FinalState | None:
    """The record's final state and the batch script's exit code (None for a state that is
    not final, such as a requeued run's)."""
    return final_state(rec.get("JobState", ""), rec.get("ExitCode", "0:0"))
