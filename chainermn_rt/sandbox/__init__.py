"""The local multi-node Slurm sandbox: life cycle and a small job API the CLI and tests share.

>>> sb = Sandbox.from_profile()                      # doctest: +SKIP
>>> sb.up()                                          # doctest: +SKIP
'sandbox up: 2 nodes (netns mode) ...'
>>> job = sb.submit("#!/bin/sh\\nsrun hostname\\n", ["--nodes=2"])   # doctest: +SKIP
>>> sb.wait(job)                                     # doctest: +SKIP
FinalState(state='COMPLETED', exit_code=0)
>>> print(sb.output(job))                            # doctest: +SKIP
node1
node2

See docs/sandbox.md.
"""

from chainermn_rt.sandbox.cluster import Sandbox, SandboxError, Status
from chainermn_rt.sandbox.records import FinalState

__all__ = ["FinalState", "Sandbox", "SandboxError", "Status"]
