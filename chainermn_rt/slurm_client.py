"""The one place that runs Slurm's client commands: submit a script, wait for its final state.

>>> slurm = Slurm()                                # doctest: +SKIP
>>> job = slurm.submit(Path("job.sh"))             # doctest: +SKIP
>>> slurm.wait(job)                                # doctest: +SKIP
FinalState(state='COMPLETED', exit_code=0)

The final state is read from Slurm (``scontrol show job``, then ``sacct``), never from
``sbatch --wait``'s status alone: a job whose step timed out can still exit 0. A cluster
without accounting (the sandbox) passes its own ``records`` in place of ``sacct``.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from chainermn_rt.errors import EnvironmentProblem, JobFailed, UserError
from chainermn_rt.slurm_records import record, records

FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "BOOT_FAIL", "DEADLINE")


class FinalState(NamedTuple):
    """A finished job: its final state (``COMPLETED``, ``FAILED``, ``TIMEOUT``...), exit code."""

    state: str
    exit_code: int


@dataclass(frozen=True)
class Slurm:
    """Slurm's client commands, run with ``env`` (default: this process's environment)."""

    env: Mapping[str, str] | None = None
    records: Callable[[str], FinalState | None] | None = None

    def run(self, argv: list[str], timeout: float = 120, cwd: str | Path | None = None
            ) -> subprocess.CompletedProcess:
        """Run a client command (``sinfo``, ``srun ...``); a CompletedProcess with text output."""
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  cwd=cwd, env=None if self.env is None else dict(self.env))
        except FileNotFoundError:
            raise EnvironmentProblem(f"{argv[0]}: not found; run it where Slurm's client "
                                     "commands reach the cluster (for the sandbox: "
                                     "`chainermn-rt sandbox up`)") from None

    def output(self, argv: list[str], timeout: float = 30) -> str:
        """A client command's standard output; EnvironmentProblem (Slurm's last line) when it
        fails or does not answer within ``timeout`` seconds."""
        try:
            proc = self.run(argv, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem(f"{' '.join(argv)}: no answer in {timeout:.0f} s") from None
        if proc.returncode != 0:
            said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            raise EnvironmentProblem(f"{' '.join(argv)} failed (exit {proc.returncode}): "
                                     f"{said[-1] if said else 'no message'}")
        return proc.stdout

    def listing(self, kind: str) -> dict[str, dict[str, str]]:
        """``scontrol show partition|node -o``: each record by its name."""
        key = {"partition": "PartitionName", "node": "NodeName"}[kind]
        return {r[key]: r for r in records(self.output(["scontrol", "show", kind, "-o"]))
                if key in r}

    def hostnames(self, hostlist: str) -> list[str]:
        """``node[1-3,5],gpu7`` -> node1 node2 node3 node5 gpu7 (Slurm's own parser)."""
        if not hostlist or hostlist == "(null)":
            return []
        return self.output(["scontrol", "show", "hostnames", hostlist]).split()

    def submit(self, script: Path, args: list[str] = (), cwd: str | Path | None = None) -> str:
        """``sbatch --parsable [ARGS] SCRIPT`` in ``cwd``; the job id. Slurm's refusal is a
        UserError with Slurm's message."""
        proc = self.run(["sbatch", "--parsable", *args, str(Path(script).absolute())],
                        cwd=cwd or os.getcwd())
        if proc.returncode != 0:
            raise UserError("sbatch refused the job: "
                            + (proc.stderr.strip() or proc.stdout.strip()).replace("\n", "; "))
        return proc.stdout.strip().split(";")[0]

    def show(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o``'s fields, or {} once Slurm has forgotten the job."""
        proc = self.run(["scontrol", "show", "job", "-o", str(job_id)], timeout=60)
        return record(proc.stdout) if proc.returncode == 0 else {}

    def stdout_path(self, job_id: str) -> Path | None:
        """Where the job's standard output goes, as Slurm says."""
        out = self.show(job_id).get("StdOut")
        return Path(out) if out else None

    def state(self, job_id: str) -> FinalState | None:
        """The job's final state, or None while it is pending or running."""
        fields = self.show(job_id)
        if fields.get("JobState"):
            return final_state(fields["JobState"], fields.get("ExitCode", "0:0"))
        if self.records is not None:
            return self.records(str(job_id))
        proc = self.run(["sacct", "-n", "-P", "-X", "-j", str(job_id), "-o", "State,ExitCode"],
                        timeout=60)
        line = proc.stdout.strip().splitlines()[:1] if proc.returncode == 0 else []
        if not line or "|" not in line[0]:
            return None
        return final_state(*line[0].split("|", 1))

    def wait(self, job_id: str, timeout: float | None = None, poll: float = 1.0) -> FinalState:
        """Poll until the job ends; :class:`JobFailed` when ``timeout`` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (found := self.state(job_id)) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise JobFailed(f"job {job_id} did not end within {timeout:.0f} s; it goes on "
                                f"(scancel {job_id} stops it)")
            time.sleep(poll)
        return found


def final_state(state: str, exit_code: str) -> FinalState | None:
    """A FinalState from Slurm's words (``TIMEOUT``, ``0:15``), None if not final yet.
    The exit code is the number before ``:`` (after it is the signal)."""
    state = state.split()[0] if state.strip() else ""
    if state not in FINAL_STATES:
        return None
    code = exit_code.partition(":")[0]
    return FinalState(state, int(code) if code.isdigit() else -1)
