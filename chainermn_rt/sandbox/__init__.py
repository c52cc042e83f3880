"""The local multi-node Slurm sandbox: its life cycle, and a client for jobs on it.

>>> sb = Sandbox.from_profile()                      # doctest: +SKIP
>>> sb.up()                                          # doctest: +SKIP
'sandbox: up (2 nodes), state folder .../build/sandbox ...'
>>> job = sb.slurm.submit(Path("job.sh"), ["--nodes=2"])   # doctest: +SKIP
>>> sb.slurm.wait(job)                               # doctest: +SKIP
FinalState(state='COMPLETED', exit_code=0)

See docs/sandbox.md.
"""

from chainermn_rt.jobs import Slurm
from chainermn_rt.sandbox.cluster import Sandbox, SandboxError
from chainermn_rt.sandbox.settings import sandbox_settings
from chainermn_rt.sandbox.status import Status
from chainermn_rt.site import Site

__all__ = ["Sandbox", "SandboxError", "Status", "slurm_for"]


def slurm_for(site: Site) -> Slurm:
    """Slurm as this shell reaches it; for a profile with a ``[sandbox]`` table, that sandbox,
    from any folder (SandboxError when it is not up)."""
    if site.sandbox is None:
        return Slurm()
    return Sandbox(site, sandbox_settings(site)).client()
