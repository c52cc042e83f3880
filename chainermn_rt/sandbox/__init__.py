"""The local multi-node Slurm sandbox: its life cycle, and a client for jobs on it.

>>> sb = Sandbox.from_profile()                      # doctest: +SKIP
>>> sb.up()                                          # doctest: +SKIP
'sandbox: up (2 nodes), state folder .../build/sandbox ...'
>>> job = sb.slurm.submit(Path("job.sh"), ["--nodes=2"])   # doctest: +SKIP
>>> sb.slurm.wait(job)                               # doctest: +SKIP
FinalState(state='COMPLETED', exit_code=0)

Commands reach it through :class:`chainermn_rt.submission.Cluster` for a profile with a
``[sandbox]`` table. See docs/sandbox.md.
"""

from chainermn_rt.sandbox.cluster import Sandbox, SandboxError, as_running
from chainermn_rt.sandbox.settings import sandbox_settings
from chainermn_rt.sandbox.status import Status

__all__ = ["Sandbox", "SandboxError", "Status", "as_running", "sandbox_settings"]
