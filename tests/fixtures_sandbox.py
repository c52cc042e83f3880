"""The ``sandbox`` fixture: one real Slurm sandbox per test session (see docs/sandbox.md).

    def test_two_nodes(sandbox):
        job = sandbox.submit("#!/bin/sh\\nsrun hostname\\n", ["--nodes=2"])
        assert sandbox.wait(job) == ("COMPLETED", 0)
        print(sandbox.output(job))

The fixture is a :class:`chainermn_rt.sandbox.Sandbox`: ``submit(script path or text, args)``
-> job id, ``wait(job)`` -> ``(state, exit_code)`` from Slurm's job records, ``output(job)``,
``record(job)``, ``run(argv)`` for client commands (``srun``, ``sbatch --test-only``...) and
``state_dir``. A sandbox already up in build/sandbox is reused and left up; one the fixture
started is brought down at the end of the session. Failing to start fails the test, never skips.
"""

from __future__ import annotations

import pytest

from chainermn_rt.sandbox import Sandbox, SandboxError

from conftest import REPO, require_commands

SANDBOX_COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "ip",
                    "nsenter", "unshare")


@pytest.fixture(scope="session")
def sandbox():
    require_commands(*SANDBOX_COMMANDS)
    sb = Sandbox.from_profile(state_dir=REPO / "build" / "sandbox")
    started = not sb.status().up
    if started:
        try:
            sb.up()
        except SandboxError as err:
            pytest.fail(f"the Slurm sandbox did not start: {err}", pytrace=False)
    yield sb
    if started:
        sb.down()
