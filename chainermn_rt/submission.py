"""From a decided job to Slurm's answer: the one path every command takes to run a Plan.

``render`` writes a Plan's script; ``submit``, ``doctor --site`` and ``scaling`` also hand it
to the Slurm that serves the site: the profile's sandbox when it has a ``[sandbox]`` table
(reached from any folder), else the Slurm this shell reaches::

    cluster = Cluster.of(site)                     # SandboxError (exit 3) if the sandbox is down
    job = cluster.submit(plan, folder / "job.sh")  # written whole, then sbatch from its folder
    cluster.wait(job)                              # FinalState(state='COMPLETED', exit_code=0)
    cluster.run(folder / "job.sh", plan)           # both, and the log: Finished(job, state, ...)

``run`` is the one submit-and-wait path that applies the policy for Debian's Open MPI start-up
crash (chainermn_rt.sandbox.mpi_crash): on the sandbox, such a job is submitted once more.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from chainermn_rt.errors import JobFailed, UserError
from chainermn_rt.files import write_atomically
from chainermn_rt.plan import Plan
from chainermn_rt.reach import EXECUTE, READ, WRITE, Who, blocker
from chainermn_rt.render import render
from chainermn_rt.runtimes import RUNTIMES
from chainermn_rt.sandbox import mpi_crash
from chainermn_rt.site import Site
from chainermn_rt.slurm_client import FinalState, Slurm

LOG_BYTES = 16 << 20  # a job's log read whole up to this; past it, its first and last halves


class Finished(NamedTuple):
    """A job that ended: its id, final state, log file (as Slurm named it) and the log's text."""

    job: str
    state: FinalState
    log: Path | None
    text: str


def job_user(plan: Plan) -> Who:
    """Who the job runs as: sbatch's ``--uid``/``--gid`` where the Plan sets them, else us."""
    options = dict(plan.sbatch)
    if options.get("uid") is None:
        return Who.this_process()
    return Who.named(options["uid"], options.get("gid"), "sbatch.uid")


def named_files(plan: Plan, cwd: Path) -> Iterator[tuple[str, Path, int]]:
    """(what, path, access the job needs) of each file the job names that is on this machine:
    its folder and log's, the image, the ranks' interpreter and our package under it, the
    command's paths, the staged folders."""
    yield "the job's folder (where it was submitted)", cwd, WRITE | EXECUTE
    log = dict(plan.sbatch).get("output") or ""
    if "/" in log and "%" not in log.rpartition("/")[0]:
        yield "the job's log folder (--log)", cwd / log.rpartition("/")[0], WRITE | EXECUTE
    if plan.image:  # a registry's reference is no file here: not judged
        yield f"the image ({plan.runtime})", cwd / plan.image, READ
    if plan.runtime == "none":
        python = plan.rank_step[0]
        if "/" in python:
            yield "the ranks' interpreter", cwd / python, EXECUTE
        if Path(python).absolute() == Path(sys.executable).absolute():
            yield "the ranks' chainermn_rt", Path(__file__).parent, READ | EXECUTE
    for i, arg in enumerate(plan.command):
        path = cwd / arg
        if "/" in arg and os.path.exists(path) and arg != plan.rank_step[0]:
            yield (f"the command's argument {i}",
                   path, READ | EXECUTE if i == 0 or path.is_dir() else READ)
    for source in plan.stage.sources if plan.stage else ():
        yield "--stage", Path(source), READ | EXECUTE


def check_reach(plan: Plan, cwd: Path) -> None:
    """UserError naming the first file the job names (:func:`named_files`) that the user it
    runs as cannot reach from this machine (chainermn_rt.reach), before anything is
    submitted: every rank would fail alike on the nodes; first, a folder the job's container
    runtime cannot run it in."""
    RUNTIMES[plan.runtime].check_job_folder(str(cwd.absolute()),
                                            "the job's folder (where it was submitted)")
    who = job_user(plan)
    if who.uid == 0:
        return
    for what, path, need in named_files(plan, cwd):
        reason = blocker(path, who, need)
        if reason:
            raise UserError(f"{what}: {path} is out of reach of {who} (uid {who.uid}), as whom "
                            f"the job runs: {reason}; allowed: what that user may reach on "
                            "every node, e.g. a shared project folder")


def write_script(plan: Plan, path: Path) -> Path:
    """The Plan's sbatch script at ``path``: whole or not at all, executable."""
    text = render(plan)
    write_atomically(path, lambda f: f.write(text), mode=0o755)
    return path


@dataclass(frozen=True)
class Cluster:
    """A site and the Slurm its jobs go to."""

    site: Site
    slurm: Slurm

    @classmethod
    def of(cls, site: Site) -> Cluster:
        if site.sandbox is None:
            return cls(site, Slurm())
        from chainermn_rt.sandbox import Sandbox, sandbox_settings

        return cls(site, Sandbox(site, sandbox_settings(site)).client())

    def submit(self, plan: Plan, script: Path, cwd: Path | None = None,
               after: str | None = None) -> str:
        """Write ``script`` and submit it from ``cwd`` (default: its folder), where the job
        then runs; ``after``: once that job has ended, whatever its state. The job id."""
        check_reach(plan, cwd or script.parent)
        write_script(plan, script)
        dependency = [f"--dependency=afterany:{after}"] if after else []
        return self.slurm.submit(script, dependency, cwd=cwd or script.parent)

    def state(self, job: str) -> FinalState | None:
        return self.slurm.state(job)

    def wait(self, job: str, timeout: float | None = None) -> FinalState:
        return self.slurm.wait(job, timeout=timeout)

    def run(self, script: Path, plan: Plan | None = None, cwd: Path | None = None,
            started: str | None = None, timeout: float | None = None,
            submitted: Callable[[str], object] = lambda job: None,
            say: Callable[[str], object] = print) -> Finished:
        """Submit ``script`` (the Plan's, written first when ``plan`` is given) from ``cwd``
        (default: its folder), wait at most ``timeout`` seconds for its end, read its log;
        ``submitted`` is told each job id. On the sandbox a job that FAILED with Open MPI's
        start-up crash before its log showed ``started`` (mpi_crash) is submitted once more,
        and ``say`` told why; JobFailed when every try crashed so."""
        if plan is not None:
            check_reach(plan, cwd or script.parent)
            write_script(plan, script)

        def launch() -> Finished:
            job = self.slurm.submit(script, cwd=cwd or script.parent)
            submitted(job)
            log = self.slurm.stdout_path(job)  # while Slurm still knows the job
            state = self.slurm.wait(job, timeout=timeout, poll=0.5)
            return Finished(job, state, log, read_log(log))

        def crashed(done: Finished) -> bool:
            return (self.site.sandbox is not None and done.state.state == "FAILED"
                    and mpi_crash.crashed_at_start(done.text, started))

        tries = mpi_crash.launched(launch, crashed,
                                   lambda done: say(mpi_crash.once_more(done.job)))
        if crashed(tries[-1]):
            raise JobFailed(mpi_crash.again([t.job for t in tries], tries[-1].log))
        return tries[-1]


def read_log(path: Path | None) -> str:
    """A job's log as text (bytes that are not UTF-8 replaced), '' where there is no such
    file; past LOG_BYTES, its first and last halves of that and what was left out between."""
    if path is None or not path.is_file():  # not a FIFO or a device either
        return ""
    try:
        with open(path, "rb") as f:
            data = f.read(LOG_BYTES + 1)
            if len(data) > LOG_BYTES:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(size - LOG_BYTES // 2, LOG_BYTES // 2))
                data = (data[:LOG_BYTES // 2] + b"\n[... %d bytes of the log left out ...]\n"
                        % (size - LOG_BYTES) + f.read(LOG_BYTES // 2))
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")
