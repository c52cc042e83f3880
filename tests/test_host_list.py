"""The file of hosts to keep a job off: what the doctor and a --timeline job write is what
``--exclude-from`` reads, into ``#SBATCH --exclude``; a damaged file is one line, exit 2."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chainermn_rt import host_list
from chainermn_rt.doctor.check import Check
from chainermn_rt.doctor.table import exclude_text

from conftest import PYTHON, folder_contents

NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,8}[0-9]", fullmatch=True), max_size=6)


@given(NAMES)
def test_what_is_written_reads_back(names):
    assert host_list.parse(host_list.text(names), "f") == tuple(names)


def test_the_doctor_writes_the_same_form():
    blamed = exclude_text([Check("x", "FAIL", "", "", ("node2", "node10"))])
    assert blamed == host_list.text(["node2", "node10"]) == "node2,node10\n"


def _render(tmp_path, content: str | None, *more):
    hosts = tmp_path / "hosts.txt"
    if content is not None:
        hosts.write_text(content)
    return subprocess.run([PYTHON, "-m", "chainermn_rt", "render", "--site", "sandbox",
                           "--nodes", "1", "--exclude-from", str(hosts), "--output",
                           str(tmp_path / "out" / "job.sh"), *more, "--", "true"],
                          capture_output=True, text=True, timeout=60)


def test_the_file_becomes_sbatch_exclude(tmp_path):
    (tmp_path / "out").mkdir()
    proc = _render(tmp_path, "node2,node10\n")
    assert proc.returncode == 0, proc.stderr
    lines = (tmp_path / "out" / "job.sh").read_text().splitlines()
    assert "#SBATCH --exclude=node2,node10" in lines
    (tmp_path / "out" / "job.sh").unlink()
    assert _render(tmp_path, "").returncode == 0  # an empty list: nothing excluded
    assert not any(line.startswith("#SBATCH --exclude")
                   for line in (tmp_path / "out" / "job.sh").read_text().splitlines())


@pytest.mark.parametrize("content, said", [
    ("node2;reboot\n", "'node2;reboot' is not a node name"),
    ("node2,$(id)\n", "'$(id)' is not a node name"),
    (None, "no such file or directory"),
])
def test_a_damaged_file_is_one_line_and_writes_nothing(tmp_path, content, said):
    (tmp_path / "out").mkdir()
    proc = _render(tmp_path, content)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("chainermn-rt render: error: --exclude-from: ") and \
        said in proc.stderr, proc.stderr
    assert folder_contents(tmp_path / "out") == {}
