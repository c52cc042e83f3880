"""Submit a script with sbatch and wait for its final state, on any Slurm cluster.

>>> job = submit(Path("job.sh"))                 # doctest: +SKIP
>>> wait(job)                                    # doctest: +SKIP
FinalState(state='COMPLETED', exit_code=0)

The final state is read from Slurm (``scontrol show job``, then ``sacct``), never from
``sbatch --wait``'s status alone: a job whose step timed out can still exit 0.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from chainermn_rt.errors import UserError

FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "BOOT_FAIL", "DEADLINE")


class FinalState(NamedTuple):
    """A finished job: its final state (``COMPLETED``, ``FAILED``, ``TIMEOUT``...), exit code."""

    state: str
    exit_code: int


def _run(argv: list[str], env: Mapping[str, str] | None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    except FileNotFoundError:
        raise UserError(f"{argv[0]}: not found; allowed: a machine with Slurm's client "
                        "commands (for the sandbox: `make sandbox-up`)") from None


def submit(script: Path, extra: list[str] = (), env: Mapping[str, str] | None = None) -> str:
    """``sbatch --parsable SCRIPT``; returns the job id. Slurm's refusal is a UserError."""
    proc = _run(["sbatch", "--parsable", *extra, str(script)], env)
    if proc.returncode != 0:
        raise UserError(f"sbatch refused the job: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip().split(";")[0]


def _scontrol_state(job_id: str, env) -> tuple[str, int] | None:
    proc = _run(["scontrol", "show", "job", "-o", job_id], env)
    if proc.returncode != 0:
        return None
    state = re.search(r"\bJobState=(\S+)", proc.stdout)
    code = re.search(r"\bExitCode=(\d+):(\d+)", proc.stdout)
    if not state:
        return None
    exit_code = int(code.group(1)) if code else 0
    return state.group(1), exit_code


def _sacct_state(job_id: str, env) -> tuple[str, int] | None:
    proc = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode"], env)
    line = proc.stdout.strip().splitlines()[:1] if proc.returncode == 0 else []
    if not line or "|" not in line[0]:
        return None
    state, code = line[0].split("|", 1)
    return state.split()[0], int(code.split(":")[0] or 0)


def wait(job_id: str, env: Mapping[str, str] | None = None, timeout: float = 3600,
         poll: float = 1.0) -> FinalState:
    """Poll until the job reaches a final state: ``scontrol`` while Slurm remembers the job
    (MinJobAge), then ``sacct`` where accounting runs."""
    deadline = time.monotonic() + timeout
    while True:
        for read in (_scontrol_state, _sacct_state):
            found = read(job_id, env)
            if found and found[0] in FINAL_STATES:
                return FinalState(*found)
            if found:
                break
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} not finished after {timeout:.0f} s")
        time.sleep(poll)

