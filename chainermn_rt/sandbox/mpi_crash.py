"""Debian's Open MPI 4.1.4 start-up crash on the sandbox: told apart, and its job run once more.

Now and then (2 of 300 bare ``srun --mpi=pmix`` launches of 2 x 2 ranks with the host's
cores busy, none of 150 idle; docs/sandbox.md) a rank segfaults in ``MPI_Init``: waiting
in the modex fence, it receives the first message of a peer already past ``MPI_Init``, and its
TCP BTL calls the PML's handler for it, not yet registered (a null pointer; the core dump's
stack: ``ompi_mpi_init`` -> ``opal_progress`` -> libevent -> ``mca_btl_tcp``). The job's log
then shows Open MPI's report of a segfault at address ``(nil)``, before any rank said it had
started. Only the sandbox's jobs are retried so (``make demo``, the tests); a job on a real
cluster ends as it ends.

>>> crashed_at_start("Signal: Segmentation fault (11)\\nFailing at address: (nil)\\n")
True
>>> crashed_at_start("Signal: Segmentation fault (11)\\nFailing at address: (nil)\\n"
...                  "4 ranks, communicator ...", started=" ranks, communicator ")
False
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from chainermn_rt.slurm_client import FinalState, Slurm


class Finished(NamedTuple):
    """A job that ended: its id, final state, log file (as Slurm named it) and the log's text."""

    job: str
    state: FinalState
    log: Path | None
    text: str


def crashed_at_start(text: str, started: str | None = None) -> bool:
    """``text`` (a job's log) shows the crash above, and not ``started`` (when given): a line
    that the program prints once its ranks are past MPI's start-up."""
    return ("Signal: Segmentation fault" in text and "Failing at address: (nil)" in text
            and (started is None or started not in text))


def submit_retrying(slurm: Slurm, script: Path, cwd: Path, started: str,
                    args: Sequence[str] = (), timeout: float = 900,
                    say: Callable[[str], None] = print) -> Finished:
    """Submit ``script`` from ``cwd`` and wait for it to end. A job that FAILED with the crash
    above before its log showed ``started`` is submitted once more, and ``say`` is told why."""
    done = _run(slurm, script, cwd, args, timeout)
    if done.state.state == "FAILED" and crashed_at_start(done.text, started):
        say(f"job {done.job}: Debian's Open MPI 4.1.4 crashed in MPI_Init, a known fault of the "
            "sandbox's MPI (docs/sandbox.md); submitting the job once more")
        done = _run(slurm, script, cwd, args, timeout)
    return done


def _run(slurm: Slurm, script: Path, cwd: Path, args: Sequence[str],
         timeout: float) -> Finished:
    job = slurm.submit(script, list(args), cwd=cwd)
    log = slurm.stdout_path(job)  # while Slurm still knows the job
    state = slurm.wait(job, timeout=timeout, poll=0.5)
    return Finished(job, state, log, log.read_text(errors="replace") if log and log.exists()
                    else "")
