"""ReFrame's job scripts for chainermn-rt's checks run what chainermn-rt's own job scripts run:
``reframe --dry-run`` (no Slurm) on the configuration ``site reframe`` writes.
tests/test_reframe_sandbox.py runs the checks on the sandbox."""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_reframe import reframe

from chainermn_rt.doctor.job import doctor_plan
from chainermn_rt.job_request import Request
from chainermn_rt.reframe.jobs import REFRAME_WRITES
from chainermn_rt.render import render
from chainermn_rt.site import load_site, resolve_site
from chainermn_rt.slurm_rules import parse_time

from conftest import REPO


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chainermn_rt", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def _launch_line(script: str) -> list[str]:
    """The rank step's line of a job script (continuation lines joined), as argv: the last
    ``srun`` (the doctor's node check under pyxis comes before it)."""
    lines = script.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("srun "))
    joined = ""
    for line in lines[start:]:
        joined += line.rstrip("\\").rstrip() + " "
        if not line.endswith("\\"):
            break
    argv = shlex.split(joined)
    return argv[:-1] if argv[-1] == "&" else argv


def _directives(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines()
            if line.startswith("#SBATCH ")]


def _module_lines(script: str) -> list[str]:
    """From the module check to the last ``module load`` and ``set -u``."""
    lines = script.splitlines()
    if not any(line.startswith("module load ") for line in lines):
        return []
    start = next(i for i, line in enumerate(lines) if line.startswith("if ! type module"))
    end = max(i for i, line in enumerate(lines) if line.startswith("module load "))
    return lines[start:end + 2]


@pytest.mark.parametrize("site_name, partition", [("sandbox", "gpu"), ("dgx-h100", "batch"),
                                                  ("quad-gpu", "gpu")])
def test_the_dry_run_script_runs_the_rendered_launch_line(reframe_venv, tmp_path, site_name,
                                                           partition):
    config = tmp_path / "config.py"
    made = cli("site", "reframe", "--site", site_name, "--output", config, "--scheduler",
               "squeue")
    assert made.returncode == 0, made.stderr
    site = load_site(resolve_site(site_name))
    proc = reframe(reframe_venv, config, ["--dry-run", "-n", "ChainermnRtDoctor", "--system",
                                          f"{site.name}:{partition}"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stage = tmp_path / "stage" / site.name / partition / "chainermn-rt" / "ChainermnRtDoctor"
    script = (stage / "rfm_job.sh").read_text()
    python = sys.executable if site.container.runtime == "none" else None
    plan = doctor_plan(site, Request(nodes=2, partition=partition, python=python),
                       stage / "reports")
    ours = render(plan)
    rendered = _launch_line(ours)
    found = _launch_line(script)
    # ReFrame's srun launcher adds --cpus-per-task (Slurm 22.05's srun does not inherit it)
    assert found == [rendered[0], f"--cpus-per-task={plan.cpus_per_task}", *rendered[1:]]
    if site.container.runtime == "pyxis":
        assert any(word.startswith("--container-image=") for word in found)
        # the doctor's node check (enroot asked on each node), as the Plan's own script has it
        check = [line for line in ours.splitlines() if line.endswith(" || true")]
        assert len(check) == 1 and "enroot-nodes.txt" in check[0], ours
        assert check[0] in script.splitlines(), script
    assert "#SBATCH --no-requeue" in script.splitlines()
    # the check's time limit is the Plan's (the doctor's 10 minutes, or a shorter partition's)
    times = [o.split("=", 1)[1] for o in _directives(script) if o.startswith("--time=")]
    assert [parse_time(t, "time") for t in times] == [parse_time(dict(plan.sbatch)["time"], "")]
    assert f"#SBATCH --gpus-per-node={plan.gpus_per_node}" in script.splitlines()
    # the environment, exported as ReFrame writes it, reads back byte for byte
    exports = "\n".join(line for line in script.splitlines() if line.startswith("export "))
    read = subprocess.run(["bash", "-c", exports + '\nprintf %s "$CHAINERMN_RT_SLOTS"'],
                          capture_output=True, text=True, check=True).stdout
    assert read == dict(plan.environment)["CHAINERMN_RT_SLOTS"]
    # the Plan's options ReFrame does not write itself (account, qos, [sbatch]) and its
    # modules, as the Plan's own script has them
    kept = [option for option in _directives(ours)
            if option.removeprefix("--").split("=")[0] not in REFRAME_WRITES]
    assert kept == [option for option in _directives(script) if option in kept]
    assert set(kept) <= set(_directives(script))
    assert _module_lines(script) == _module_lines(ours)
    if site.modules:
        assert _module_lines(ours) and f"module load {site.modules[0]}" in _module_lines(ours)
    if site.account:
        assert f"--account={site.account}" in kept


def test_the_configuration_carries_the_profile(tmp_path):
    """scheduler, access (the partition: the rest comes from each check's Plan), devices and
    the expectation."""
    site_file = tmp_path / "site.toml"
    site_file.write_text((REPO / "slurm/sites/dgx-h100.toml").read_text()
                         + "\n[checks]\nallreduce_busbw_gbps = 180.0\n")
    config = tmp_path / "config.py"
    assert cli("site", "reframe", "--site", site_file, "--output", config, "--scheduler",
               "slurm").returncode == 0
    namespace: dict = {}
    exec(config.read_text(), namespace)  # noqa: S102 - the file ReFrame itself executes
    system = namespace["site_configuration"]["systems"][0]
    batch = system["partitions"][0]
    assert (system["name"], batch["name"], batch["scheduler"], batch["launcher"]) == (
        "dgx-h100", "batch", "slurm", "srun")
    assert batch["access"] == ["--partition=batch"]
    assert batch["devices"] == [{"type": "gpu", "num_devices": 8}]
    assert batch["extras"]["allreduce_busbw_gbps"] == 180.0
    assert batch["extras"]["chainermn_rt_python"] is None  # pyxis: the container's python3


@pytest.mark.parametrize("args, status, line", [
    (["--site", "sandbox", "--output", "{tmp}/c.txt"], 2,
     "--output: {tmp}/c.txt; allowed: a file ending in .py"),
    (["--site", "sandbox", "--output", "{tmp}/exists.py"], 2,
     "--output: {tmp}/exists.py exists; allowed: a new file, or --force to replace it"),
    (["--site", "cpu-cluster", "--output", "{tmp}/c.py", "--scheduler", "squeue"], 2,
     "{site}: launcher mpirun; allowed: srun (ReFrame's srun launcher runs the checks)"),
])
def test_bad_input_is_one_line_and_nothing_written(tmp_path, args, status, line):
    (tmp_path / "exists.py").write_text("kept")
    proc = cli("site", "reframe", *[a.format(tmp=tmp_path) for a in args])
    expected = line.format(tmp=tmp_path, site=resolve_site("cpu-cluster"))
    assert (proc.returncode, proc.stderr) == (status, f"chainermn-rt site: error: {expected}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists.py"]
    assert (tmp_path / "exists.py").read_text() == "kept"


def test_a_profile_path_with_python_in_it_stays_a_value(tmp_path):
    """A --site path holding newlines and code: one assignment, the path in it intact, the
    header's comment one line (the path escaped)."""
    site_file = tmp_path / "x\nimport os; os._exit(3)\n'''.toml"
    site_file.write_text((REPO / "slurm/sites/dgx-h100.toml").read_text())
    config = tmp_path / "config.py"
    proc = cli("site", "reframe", "--site", site_file, "--output", config, "--scheduler", "slurm")
    assert proc.returncode == 0, proc.stderr
    text = config.read_text()
    tree = ast.parse(text)
    assert [type(s) for s in tree.body] == [ast.Assign]
    conf = ast.literal_eval(tree.body[0].value)
    assert conf["systems"][0]["partitions"][0]["extras"]["chainermn_rt_site"] == str(site_file)
    assert text.splitlines()[0] == ("# ReFrame configuration written by `chainermn-rt site "
                                    f"reframe` from {tmp_path}/x\\nimport os; os._exit(3)\\n"
                                    "'''.toml.")
