"""Generated bad input for the commands added last (``bench``, ``scaling``, ``doctor --site``,
``render --env``): every case is refused in one line with exit 2 before any work starts, or is
accepted with values that are finite and in range; either way nothing is written.

The work itself (MPI start-up, reaching Slurm) is replaced by :class:`Reached`: a case that gets
there was accepted, and the values the command parsed are checked instead.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import chainermn_rt
from chainermn_rt import cli, submission
from chainermn_rt.arguments import parse_bytes
from chainermn_rt.commands import bench, doctor, render, scaling
from chainermn_rt.rank_contract import SETTINGS

from conftest import folder_contents

MANY = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 150)), deadline=None,
                derandomize=os.environ.get("FUZZ_RANDOM") != "1",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


class Reached(Exception):
    """The command got past its checks to the work."""


# Numbers as people mistype them, and as scripts produce them.
NUMBER_TEXT = st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "1e309", "-1", "-0", "0", "1", "1.5", "1e3",
                     "", " ", "+5", "1_0", "0x10", "٣", "2**32", "4294967296", "4294967295",
                     "18446744073709551616", "9" * 5000, "1,5", "5s", "10G", "64M", "1K", "0.0",
                     "-5", "1e-300", "\n1"]),
    st.integers(-2**70, 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=8))

# (command line without the value, option, its argparse dest); bench.* and doctor's site
# options give a base that would run.
SITE = ["--site", "sandbox"]
CASES = [
    (["bench", "allreduce", "--max-bytes", "64K"], "--repeat", "repeat"),
    (["bench", "allreduce", "--max-bytes", "64K"], "--warmup", "warmup"),
    (["bench", "allreduce"], "--min-bytes", "min_bytes"),
    (["bench", "allreduce", "--min-bytes", "8"], "--max-bytes", "max_bytes"),
    (["bench", "train", "--model", "mlp"], "--batchsize", "batchsize"),
    (["bench", "train"], "--insize", "insize"),
    (["bench", "train", "--model", "mlp"], "--iterations", "iterations"),
    (["bench", "train", "--model", "mlp"], "--warmup", "warmup"),
    (["bench", "train", "--model", "mlp"], "--seed", "seed"),
    (["scaling", *SITE, "--out", "study"], "--max-nodes", "max_nodes"),
    (["scaling", *SITE, "--out", "study", "--max-nodes", "2"], "--batchsize", "batchsize"),
    (["scaling", *SITE, "--out", "study", "--max-nodes", "2"], "--insize", "insize"),
    (["scaling", *SITE, "--out", "study", "--max-nodes", "2"], "--iterations", "iterations"),
    (["scaling", *SITE, "--out", "study", "--max-nodes", "2"], "--warmup", "warmup"),
    (["scaling", *SITE, "--out", "study", "--max-nodes", "2"], "--gpus-per-node",
     "gpus_per_node"),
    (["doctor", *SITE], "--nodes", "nodes"),
    (["doctor", *SITE, "--nodes", "1"], "--gpus-per-node", "gpus_per_node"),
    (["doctor", *SITE, "--nodes", "1", "--partition", "cpu"], "--ranks-per-node",
     "ranks_per_node"),
    (["doctor", *SITE, "--nodes", "1"], "--bandwidth-bytes", "bandwidth_bytes"),
    (["doctor", *SITE, "--nodes", "1"], "--wait-timeout", "wait_timeout"),
]


class Seen(list):
    """The args each command ran with (a short repr in hypothesis' reports)."""

    def __repr__(self) -> str:
        return f"<{len(self)} commands run>"


@pytest.fixture
def stubbed(monkeypatch, tmp_path_factory):
    """Work replaced by Reached; the args each command ran with recorded; a fresh folder per
    call (``folder()``) as the current one."""
    def reach(*_, **__):
        raise Reached

    monkeypatch.setattr(bench, "_start", reach)
    monkeypatch.setattr(chainermn_rt, "setup", reach)
    monkeypatch.setattr(submission.Cluster, "of", classmethod(reach))
    seen = Seen()
    for module in (bench, doctor, render, scaling):
        def run(args, _run=module.run):
            seen.append(args)
            return _run(args)
        monkeypatch.setattr(module, "run", run)

    def folder() -> Path:
        here = tmp_path_factory.mktemp("cwd")
        monkeypatch.chdir(here)
        return here

    return seen, folder


def run_cli(argv: list[str], capsys) -> tuple[int | str, str]:
    """(exit status, or "reached"; stderr)."""
    try:
        status = cli.main(argv)
    except Reached:
        status = "reached"
    except SystemExit as err:  # argparse's own refusal
        status = err.code
    return status, capsys.readouterr().err


def refused_in_one_line(status, err: str, command: str) -> bool:
    return status == 2 and err.count("\n") == 1 and "Traceback" not in err and \
        re.match(rf"chainermn-rt {command}( \w+)?: error: \S", err) is not None


@MANY
@given(st.sampled_from(CASES), NUMBER_TEXT)
@example(case=CASES[0], value="nan")
@example(case=CASES[8], value="4294967296")
@example(case=CASES[19], value="nan")
@example(case=CASES[19], value="-5")
@example(case=CASES[11], value="2048")
def test_every_numeric_argument_is_refused_in_one_line_or_finite(stubbed, capsys, case, value):
    seen, folder = stubbed
    base, option, dest = case
    here = folder()
    before = folder_contents(here)
    seen.clear()
    status, err = run_cli([*base, f"{option}={value}"], capsys)
    assert folder_contents(here) == before, (case, value)  # nothing written, accepted or not
    if status != "reached":
        assert refused_in_one_line(status, err, base[0]), (case, value, status, err)
        return
    parsed = getattr(seen[-1], dest)
    if isinstance(parsed, str):  # byte sizes: parsed by the command, checked before Reached
        parsed = parse_bytes(parsed, option)
    assert isinstance(parsed, int | float) and not isinstance(parsed, bool), parsed
    assert math.isfinite(parsed) and parsed >= 0, (case, value, parsed)


# -- a study folder's record, of any shape ------------------------------------------------------
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
POINTS = st.dictionaries(st.sampled_from(["1gpu", "1node", "2nodes", "x"]) | st.text(max_size=6),
                         JSON | st.fixed_dictionaries({"job": JSON}), max_size=3)


@st.composite
def records(draw):
    """What ``STUDY/scaling.json`` holds: any JSON, a record with any points, bytes, deep
    nesting, a folder or a link."""
    kind = draw(st.sampled_from(["json", "points", "bytes", "deep", "folder", "link"]))
    if kind == "json":
        return kind, json.dumps(draw(JSON))
    if kind == "points":
        return kind, json.dumps({"study": {}, "points": draw(POINTS)})
    if kind == "bytes":
        return kind, draw(st.binary(max_size=40))
    if kind == "deep":
        return kind, draw(st.integers(100, 100_000))
    return kind, draw(st.sampled_from(["/dev/zero", "elsewhere", "scaling.json"]))


@MANY
@given(records())
@example(record=("deep", 100_000))
@example(record=("link", "/dev/zero"))
@example(record=("points", '{"points": {"1node": {"job": ["1"]}}}'))
def test_a_damaged_study_record_is_refused_in_one_line(stubbed, capsys, record):
    seen, folder = stubbed
    here = folder()
    study = here / "study"
    study.mkdir()
    kind, what = record
    target = study / "scaling.json"
    if kind == "deep":
        depth = what
        target.write_text('{"points": ' + "[" * depth + "]" * depth + "}")
    elif kind == "folder":
        target.mkdir()
    elif kind == "link":
        target.symlink_to(what if what.startswith("/") else study / what)
    elif isinstance(what, bytes):
        target.write_bytes(what)
    else:
        target.write_text(what)
    before = folder_contents(here)
    status, err = run_cli(["scaling", *SITE, "--out", str(study), "--max-nodes", "2"], capsys)
    assert folder_contents(here) == before
    if status == "reached":  # a record this command could have written: points of jobs
        points = json.loads(target.read_text())["points"]
        assert all(isinstance(e, dict) and (e["job"] is None or isinstance(e["job"], str))
                   for e in points.values()), points
        return
    assert refused_in_one_line(status, err, "scaling"), (record, status, err)
    assert "--out: " in err and "scaling.json" in err, err


# -- the rank settings, wherever a profile or a request sets them -------------------------------
@MANY
@given(st.sampled_from(sorted(SETTINGS)), NUMBER_TEXT | st.sampled_from(
    ["abort", "warn", "Abort", "1", "0", "yes", "off"]))
@example(name="CHAINERMN_RT_STALL_TIMEOUT", value="nan")
@example(name="CHAINERMN_RT_STALL_ACTION", value="kill")
def test_rank_settings_in_a_request_are_refused_in_one_line(stubbed, capsys, name, value):
    seen, folder = stubbed
    here = folder()
    parse, _ = SETTINGS[name]
    try:
        parse(value.strip())
        good = True
    except ValueError:
        good = not value.strip()  # unset or empty: the default
    good = good and not re.search(r"[\x00-\x1f\x7f]", value)  # refused in any variable
    status, err = run_cli(["render", *SITE, "--nodes", "1", "--env", f"{name}={value}",
                           "--output", "job.sh", "--", "true"], capsys)
    if good:
        assert status == 0 and (here / "job.sh").exists(), err
        return
    assert refused_in_one_line(status, err, "render"), (value, status, err)
    assert f"--env {name}: " in err and "allowed: " in err, err
    assert list(here.iterdir()) == []
