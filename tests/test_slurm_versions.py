"""Slurm versions as data (slurm_rules.CHANGES): a profile's ``slurm_version`` decides, ``site
init`` writes it, ``site check --live`` compares it; the one row that changes what a job may
say (SLURM_CPUS_PER_TASK in a job's environment) is checked against both sandbox stacks'
real Slurm (22.05 and 24.11)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from chainermn_rt.errors import UserError
from chainermn_rt.job_request import Request
from chainermn_rt.plan import make_plan
from chainermn_rt.site import load_site
from chainermn_rt.slurm_rules import CHANGES, CPUS_PER_TASK_VARIABLES, behaves

from conftest import PYTHON, REPO

SANDBOX = REPO / "slurm" / "sites" / "sandbox.toml"


def _profile(tmp_path: Path, top: str) -> Path:
    """The sandbox profile with ``top`` (a slurm_version line, or nothing) for its own."""
    path = tmp_path / "site.toml"
    path.write_text(top + "".join(line for line in SANDBOX.read_text().splitlines(True)
                                  if not line.startswith("slurm_version =")))
    return path


def test_every_change_says_what_the_bundle_does():
    assert len({c.name for c in CHANGES}) == len(CHANGES)
    assert all(c.what and c.bundle and c.since >= (22, 5) for c in CHANGES)


@pytest.mark.parametrize("version, effect", [
    ("22.05", "every rank gets that many CPUs instead of the Plan's on Slurm 22.05"),
    ("24.11.5", "srun stops (\"cpus-per-task set by two different environment variables\") on "
                "Slurm 24.11"),
    (None, "srun stops (\"cpus-per-task set by two different environment variables\") on "
           "Slurm of today"),
])
@pytest.mark.parametrize("name", CPUS_PER_TASK_VARIABLES)
def test_the_cpu_variables_are_refused_saying_what_the_sites_slurm_does(tmp_path, version,
                                                                         effect, name):
    top = f'slurm_version = "{version}"\n' if version else ""
    site = load_site(_profile(tmp_path, top))
    with pytest.raises(UserError) as err:
        make_plan(site, Request(nodes=1, command=("x",), env=((name, "1"),)))
    assert str(err.value).startswith(f"--env: {name} is Slurm's") and effect in str(err.value)
    path = _profile(tmp_path, top)  # the same in the profile's [environment]
    path.write_text(path.read_text().replace("[environment]\n", f'[environment]\n{name} = "1"\n'))
    with pytest.raises(UserError) as err:
        load_site(path)
    assert f"environment.{name}: {name} is Slurm's" in str(err.value)


@pytest.mark.parametrize("bad", ["24", "24.11.5.1", "v24.11", "24.1", "", "24.11 "])
def test_a_bad_version_is_one_line_exit_2(tmp_path, bad):
    path = _profile(tmp_path, f'slurm_version = "{bad}"\n')
    proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "site", "check", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "slurm_version: " in proc.stderr and "is not a Slurm version; allowed: " \
        "MAJOR.MINOR" in proc.stderr


SCRIPT = """#!/bin/bash
#SBATCH --nodes=1 --ntasks-per-node=2 --cpus-per-task=2 --time=5
export SLURM_CPUS_PER_TASK=1
srun --mpi=none bash -c 'echo "task $SLURM_PROCID cpus-per-task ${SLURM_CPUS_PER_TASK}"'
"""


def _exported_cpu_variable(sb, tmp_path) -> str:
    """A job that sets SLURM_CPUS_PER_TASK unlike its --cpus-per-task: its srun's output."""
    jobs = sb.state_dir / "jobs"
    script = jobs / f"cpus-{tmp_path.name}.sh"
    script.write_text(SCRIPT)
    job = sb.slurm.submit(script, [f"--output={jobs}/cpus-%j.out"], cwd=jobs)
    sb.slurm.wait(job)
    return (jobs / f"cpus-{job}.out").read_text()


@pytest.mark.slurm
@pytest.mark.parametrize("stack", ["debian12", pytest.param("debian13",
                                                         marks=pytest.mark.debian13)])
def test_the_row_holds_on_each_stacks_slurm(request, tmp_path, stack):
    """What the refusal says is what that Slurm does."""
    sb = request.getfixturevalue("sandbox" if stack == "debian12" else "sandbox_debian13")
    version = sb.client().output(["scontrol", "show", "config"])
    release = next(tuple(int(x) for x in line.split("=")[1].strip().split(".")[:2])
                   for line in version.splitlines() if line.startswith("SLURM_VERSION"))
    assert release == {"debian12": (22, 5), "debian13": (24, 11)}[stack]
    out = _exported_cpu_variable(sb, tmp_path)
    if behaves(release, "cpus_per_task_two_variables"):
        assert "cpus-per-task set by two different environment variables" in out, out
        assert "task 0" not in out, out
    else:
        assert sorted(out.split("\n")[:2]) == ["task 0 cpus-per-task 1",
                                               "task 1 cpus-per-task 1"], out


@pytest.mark.slurm
def test_site_check_live_compares_the_version(sandbox, tmp_path):
    for version, said in (("22.05", "live: matches the cluster"),
                          ("24.11", "slurm_version 24.11 in the profile, 22.05 in scontrol show "
                                    "config")):
        path = tmp_path / f"{version}.toml"
        path.write_text(SANDBOX.read_text().replace('slurm_version = "22.05"',
                                                    f'slurm_version = "{version}"'))
        proc = subprocess.run([PYTHON, "-m", "chainermn_rt", "site", "check", str(path),
                               "--live"], env=sandbox.env(), capture_output=True, text=True,
                              timeout=120)
        assert said in proc.stdout, proc.stdout + proc.stderr
