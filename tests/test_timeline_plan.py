"""`render --timeline` and the profile's `metrics_textfile_dir`: the Plan decides, the job script
exports the variables a rank's chainermn_rt.timeline reads (read back by a real bash)."""

from __future__ import annotations

import subprocess

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.rank_contract import METRICS_DIR_VAR, TIMELINE_VAR
from chainermn_rt.render import render
from chainermn_rt.site import load_site

from conftest import REPO

SANDBOX = REPO / "slurm" / "sites" / "sandbox.toml"


def exported(script: str, job_id: str, cwd) -> dict[str, str]:
    """The script's exports (every line before the launch), run by bash in ``cwd``."""
    head = script[:script.index("# One rank per")]
    proc = subprocess.run(["bash", "-c", head.replace("set -euo pipefail", "") + "\nenv -0"],
                          capture_output=True, text=True, cwd=cwd, check=True,
                          env={"SLURM_JOB_ID": job_id, "PATH": "/usr/bin:/bin"})
    return dict(item.split("=", 1) for item in proc.stdout.split("\0") if "=" in item)


def test_timeline_exports_the_jobs_folder(tmp_path):
    site = load_site(SANDBOX)
    plan = make_plan(site, Request(nodes=2, command=("python3", "x.py"), timeline=True))
    env = exported(render(plan), "4242", tmp_path)
    assert env[TIMELINE_VAR] == f"{tmp_path}/timeline/4242"
    off = render(make_plan(site, Request(nodes=2, command=("python3", "x.py"))))
    assert TIMELINE_VAR not in off
    with pytest.raises(UserError, match=f"--env: .*{TIMELINE_VAR}.* are set by chainermn-rt"):
        make_plan(site, Request(nodes=2, command=("x",), timeline=True,
                                env=((TIMELINE_VAR, "/elsewhere"),)))


def test_the_profiles_metrics_folder_reaches_the_ranks(tmp_path):
    text = SANDBOX.read_text()
    path = tmp_path / "site.toml"
    path.write_text(f'metrics_textfile_dir = "/var/lib/node exporter/\'x\'"\n{text}')
    plan = make_plan(load_site(path), Request(nodes=1, command=("x",)))
    assert exported(render(plan), "1", tmp_path)[METRICS_DIR_VAR] == \
        "/var/lib/node exporter/'x'"
    # in a container the folder is bound at the same path (Charliecloud here: `-b FOLDER`)
    boxed = make_plan(load_site(path), Request(nodes=1, command=("x",), runtime="charliecloud",
                                               image="/img"))
    assert boxed.container[boxed.container.index("/img") - 1] == \
        "/var/lib/node exporter/'x':/var/lib/node exporter/'x'"
    for bad in ("relative/dir", "/var/$HOME", "/var/a:b", "/var/a,b"):
        path.write_text(f'metrics_textfile_dir = "{bad}"\n{text}')
        with pytest.raises(UserError) as err:
            load_site(path)
        assert f"metrics_textfile_dir: '{bad}' is not allowed; allowed: an absolute" in \
            str(err.value)
