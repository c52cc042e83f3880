"""The CLI's error rule: one line naming the argument or field, a documented exit status."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from chainermn_rt.errors import EXIT_STATUSES

from conftest import PYTHON


def cli(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "chainermn_rt", *args], check=False,
                          capture_output=True, text=True, timeout=60, **kwargs)


def test_help_lists_the_exit_statuses_and_no_module_docstring():
    out = cli("--help").stdout
    for code, meaning in EXIT_STATUSES.items():
        assert f"  {code}  {meaning}" in out
    assert "parses arguments" not in out and "``" not in out
    assert "exit statuses:" in cli("submit", "--help").stdout


@pytest.mark.parametrize("args, argument", [
    (["site", "check", "no-such.toml"], "FILE"),
    (["render", "--site", "no-such.toml", "--nodes", "1", "--", "true"], "--site"),
])
def test_a_missing_profile_names_the_argument_that_gave_it(tmp_path, args, argument):
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"chainermn-rt {args[0]}: error: {argument}: no-such.toml: no such file or directory; "
        "allowed: a readable site profile (.toml) or a shipped one: aws-efa, cpu-cluster, "
        "cray-ex, dgx-h100, quad-gpu, sandbox, sandbox-debian13, sandbox-dgx, sandbox-pyxis, "
        "sandbox-pyxis-debian13"]


@pytest.mark.parametrize("name", ["a\nb.toml", "a\rb\x1b[2J.toml", "a\tb.toml"])
def test_a_path_with_control_characters_stays_one_line(tmp_path, name):
    """A value from outside cannot break the message in two: its control characters escaped."""
    (tmp_path / name).write_text("[cluster\n")  # exists, bad TOML: a second error path
    for site in (name, "missing" + name):
        proc = cli("render", "--site", str(tmp_path / site), "--nodes", "1", "--", "true")
        assert proc.returncode == 2
        [line] = proc.stderr.splitlines()
        assert repr(site)[1:-1] in line and line.startswith("chainermn-rt render: error: ")
    env = {**os.environ, "CHAINERMN_RT_SITE": str(tmp_path / name)}
    proc = cli("render", "--nodes", "1", "--", "true", env=env)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_a_missing_slurm_command_is_one_line_with_status_3(tmp_path):
    proc = cli("submit", "--site", "cpu-cluster", "--nodes", "1", "--", "true", cwd=tmp_path,
               env={**os.environ, "PATH": str(tmp_path)})
    assert proc.returncode == 3, proc
    assert proc.stderr.splitlines() == [
        "chainermn-rt submit: error: sbatch: not found; run it where Slurm's client commands "
        "reach the cluster (for the sandbox: `chainermn-rt sandbox up`)"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("answer", ["", "Submitted batch job 12\n", "12abc\n", "\x1b]0;x\x07\n",
                                    "١٢\n"])
def test_an_sbatch_answer_that_is_not_a_job_id_is_one_line_with_status_3(tmp_path, answer):
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "sbatch").write_text(f"#!/bin/sh\nprintf '%s' {shlex.quote(answer)}\n")
    (stub / "sbatch").chmod(0o755)
    proc = cli("submit", "--site", "cpu-cluster", "--nodes", "1", "--", "true", cwd=tmp_path,
               env={**os.environ, "PATH": f"{stub}:{os.environ['PATH']}"})
    assert proc.returncode == 3, proc
    [line] = proc.stderr.splitlines()
    assert line.startswith("chainermn-rt submit: error: sbatch --parsable printed ") and \
        line.endswith("; expected a job id (digits, then ;cluster)"), line
