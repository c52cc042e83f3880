"""From a decided job to Slurm's answer: the one path every command takes to run a Plan.

``render`` writes a Plan's script; ``submit``, ``doctor --site`` and ``scaling`` also hand it
to the Slurm that serves the site: the profile's sandbox when it has a ``[sandbox]`` table
(reached from any folder), else the Slurm this shell reaches::

    cluster = Cluster.of(site)                     # SandboxError (exit 3) if the sandbox is down
    job = cluster.submit(plan, folder / "job.sh")  # written whole, then sbatch from its folder
    cluster.wait(job)                              # FinalState(state='COMPLETED', exit_code=0)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chainermn_rt.files import write_atomically
from chainermn_rt.plan import Plan
from chainermn_rt.render import render
from chainermn_rt.site import Site
from chainermn_rt.slurm_client import FinalState, Slurm


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
        write_script(plan, script)
        dependency = [f"--dependency=afterany:{after}"] if after else []
        return self.slurm.submit(script, dependency, cwd=cwd or script.parent)

    def state(self, job: str) -> FinalState | None:
        return self.slurm.state(job)

    def wait(self, job: str, timeout: float | None = None) -> FinalState:
        return self.slurm.wait(job, timeout=timeout)
