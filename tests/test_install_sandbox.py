"""An installed module in jobs on the sandbox: a profile that lists it fails in one line
without a `module` command in the batch shell, and runs with BASH_ENV set to Lmod's init."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_install import install

from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.site import load_site
from chainermn_rt.slurm_client import Slurm
from chainermn_rt.submission import write_script

from conftest import REPO

pytestmark = pytest.mark.slurm
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"


def test_a_profile_with_modules_needs_module_in_the_batch_shell(sandbox, wheels, tmp_path):
    if not Path(LMOD_INIT).exists():
        pytest.fail(f"{LMOD_INIT} missing: Debian's lmod (run `make setup`)", pytrace=False)
    prefix = tmp_path / "sw"
    proc = install(wheels, "--site", str(REPO / "slurm/sites/sandbox.toml"), "--prefix",
                   str(prefix))
    assert proc.returncode == 0, proc.stderr
    site_file = tmp_path / "with-module.toml"
    site_file.write_text((REPO / "slurm/sites/sandbox.toml").read_text().replace(
        'requeue = true\n', 'requeue = true\nmodules = ["chainermn-rt/0.1.0-cpu"]\n'))
    plan = make_plan(load_site(site_file), Request(
        nodes=1, gpus_per_node=1, time="5", command=("sh", "-c", 'echo "site=$CHAINERMN_RT_SITE"'
                                                    '; chainermn-rt --version')))
    script = write_script(plan, tmp_path / "job.sh")
    results = {}
    for name, extra in (("plain", {}),
                        ("bash_env", {"BASH_ENV": LMOD_INIT,
                                      "MODULEPATH": str(prefix / "modulefiles")})):
        slurm = Slurm(env={**sandbox.env(), **extra}, records=sandbox.final_state)
        job = slurm.submit(script, cwd=tmp_path)
        state = slurm.wait(job, timeout=300, poll=0.5)
        log = next(tmp_path.glob(f"*-{job}.out")).read_text(errors="replace")
        results[name] = (tuple(state), log)
    state, log = results["plain"]
    assert state == ("FAILED", 1), log
    assert log.strip().splitlines()[-1] == (
        "chainermn-rt: no 'module' command in this batch shell: set BASH_ENV to your module "
        "system's init/bash (Lmod: /usr/share/lmod/lmod/init/bash) or start the script with "
        "#!/bin/bash -l"), log
    state, log = results["bash_env"]
    assert state == ("COMPLETED", 0), log
    assert f"site={prefix}/chainermn-rt/0.1.0-cpu/site.toml" in log.splitlines(), log
    assert "chainermn-rt 0.1.0" in log.splitlines(), log
