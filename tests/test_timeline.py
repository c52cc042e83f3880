"""The timeline's record files, their merge into a Chrome trace (checked against the format),
damaged and missing files, clock offsets, and the two commands' answers
(chainermn_rt/timeline/; the real MPI runs are in test_timeline_mpi.py)."""

from __future__ import annotations

import json

import numpy
import pytest
from timeline_fakes import ORIGIN_NS, check_trace, write_run

from chainermn_rt import cli
from chainermn_rt.errors import UserError
from chainermn_rt.timeline import gpu, locate, merge, records


def _compute(ranks=4, steps=40, slow=None):
    c = numpy.full((ranks, steps), 5000.0)
    if slow is not None:
        c[slow] *= 1.5
    return c


def test_a_merged_trace_keeps_the_format_and_the_units(tmp_path):
    write_run(tmp_path, _compute())
    trace = merge.trace(merge.load(tmp_path))
    json.loads(json.dumps(trace))  # JSON, nothing else
    timed = check_trace(trace)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {"node1", "node2"}  # a process per node
    threads = {(e["pid"], e["tid"]) for e in timed}
    assert sorted(t for _, t in threads) == [0, 1, 2, 3]  # a thread per rank
    compute = [e for e in timed if e["name"] == "compute"]
    assert len(compute) == 4 * 40 and {e["dur"] for e in compute} == {5000}  # microseconds
    assert min(e["ts"] for e in timed) == 0


def test_an_injected_clock_offset_is_corrected(tmp_path):
    """Rank 2's clock reads 7.3 s ahead: its part line carries the offset that corrects it, and
    the merged trace puts every rank's exchange end at the same instant."""
    compute = _compute()
    write_run(tmp_path / "skewed", compute, skew_us={2: 7_300_000.0})
    write_run(tmp_path / "plain", compute)
    skewed = merge.trace(merge.load(tmp_path / "skewed"))
    plain = merge.trace(merge.load(tmp_path / "plain"))
    check_trace(skewed)
    when = lambda trace: [(e["name"], e["pid"], e["tid"], e.get("ts"), e.get("dur"))  # noqa: E731
                          for e in trace["traceEvents"]]
    assert when(skewed) == when(plain)
    ends = {}
    for e in skewed["traceEvents"]:
        if e["name"] == "exchange":
            ends.setdefault(e["args"]["iteration"], set()).add(e["ts"] + e["dur"])
    assert all(len(v) == 1 for v in ends.values()) and len(ends) == 40
    raw = records.read_file(tmp_path / "skewed" / records.file_name(2))[0].info
    assert raw.origin_ns == ORIGIN_NS + 7_300_000_000 and raw.offset_us == -7_300_000.0


def test_the_end_estimate_spreads_the_drift_over_the_part(tmp_path):
    write_run(tmp_path, _compute(2, 30))
    path = tmp_path / records.file_name(1)
    lines = path.read_text().splitlines(keepends=True)
    end = json.loads(lines[-1])
    end["clock"]["offset_us"] = 1000.0  # 1 ms of drift by the end
    lines[-1] = json.dumps(end) + "\n"
    path.write_text("".join(lines))
    part = merge.load(tmp_path).parts[1][0]
    assert merge.aligned(part, 0) == ORIGIN_NS / 1000
    assert merge.aligned(part, end["at_us"]) == ORIGIN_NS / 1000 + end["at_us"] + 1000.0
    half = end["at_us"] / 2
    assert merge.aligned(part, half) == ORIGIN_NS / 1000 + half + 500.0


def test_a_requeued_run_is_appended_and_marked(tmp_path):
    write_run(tmp_path, _compute(2, 30), ended=False)
    write_run(tmp_path, _compute(2, 30), part=2, restart=1, first_iteration=31, later_s=60)
    run = merge.load(tmp_path)
    assert [p.info.part for p in run.parts[0]] == [1, 2]
    trace = merge.trace(run)
    check_trace(trace)
    marks = [e["name"] for e in trace["traceEvents"] if e["ph"] == "i" and e["tid"] == 0]
    assert marks == ["part 1", "ended without an end line (crashed, killed or stopped)",
                     "part 2 (requeued: restart 1)"]
    assert len(merge.tables(run).iteration) == 60


def test_a_crashed_run_merges_up_to_the_crash(tmp_path):
    write_run(tmp_path, _compute(2, 30), ended=False)
    path = tmp_path / records.file_name(1)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:11]))  # rank 1 died after 10 steps
    run = merge.load(tmp_path)
    check_trace(merge.trace(run))
    assert len(merge.tables(run).iteration) == 10 and run.damaged == []


@pytest.mark.parametrize("damage, message", [
    (lambda t: t[:-7], "line 32: cut short (no newline at its end"),
    (lambda t: t.replace('"kind":"step","it":5,', '"kind":"step","it":"5",', 1),
     "line 6: it is '5'; allowed: a whole number >= 0"),
    (lambda t: t.replace('"format":1', '"format":9'), "line 1: format is 9; allowed: 1"),
    (lambda t: t.replace('"staged":false', '"staged":"yes"'),
     "line 1: staged is 'yes'; allowed: true or false"),
    (lambda t: "\n".join(t.splitlines()[1:]) + "\n", "line 1: a 'step' line before any part"),
    (lambda t: t.replace('"ph":[["data",', '"ph":[["lunch",', 1), "line 2: phase name 'lunch'"),
    (lambda t: t + "\x00\xff\n", "line 33: not JSON"),
])
def test_a_damaged_file_is_one_line_naming_it(tmp_path, capsys, damage, message):
    folder = tmp_path / "run"
    write_run(folder, _compute(2, 30))
    path = folder / records.file_name(1)
    path.write_bytes(damage(path.read_text()).encode("utf-8", "surrogateescape"))
    status = cli.main(["timeline", str(folder)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert f"rank-00001.jsonl: {message}" in err and "--partial" in err
    assert not (folder / "trace.json").exists()
    status = cli.main(["timeline", str(folder), "--partial", "--output",
                       str(tmp_path / "t.json")])
    out, err = capsys.readouterr()
    assert status == 0 and "left out: " in err and "rank-00001.jsonl" in err
    check_trace(json.loads((tmp_path / "t.json").read_text()))


def test_a_missing_rank_file_is_named(tmp_path, capsys):
    write_run(tmp_path, _compute(3, 30))
    (tmp_path / records.file_name(2)).unlink()
    assert cli.main(["timeline", str(tmp_path)]) == 2
    assert "rank-00002.jsonl: missing (the run had 3 ranks)" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path), "--partial", "--output",
                     str(tmp_path / "r.html")]) == 0
    assert "left out" in (tmp_path / "r.html").read_text()


def test_a_folder_with_no_records_says_how_to_turn_it_on(tmp_path, capsys):
    for command in ("timeline", "report"):
        assert cli.main([command, str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "holds no timeline records" in err
        assert "--timeline" in err and "CHAINERMN_RT_TIMELINE" in err


def test_a_job_id_finds_its_folder(tmp_path, monkeypatch, capsys):
    write_run(tmp_path / "timeline" / "42", _compute(2, 30))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["timeline", "42"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{tmp_path}/timeline/42/trace.json: 2 ranks on 1 node, 30 steps")

    class NoSlurm:
        def show(self, job):
            return {}

    with pytest.raises(UserError, match=r"job 43: no folder timeline/43 here; turn the "):
        locate.folder_of("43", slurm=NoSlurm())

    class Slurm:
        def show(self, job):
            return {"JobId": job, "WorkDir": str(tmp_path)}

    assert locate.folder_of("42", cwd=tmp_path / "timeline", slurm=Slurm()) == \
        tmp_path / "timeline" / "42"
    with pytest.raises(UserError, match="no such folder"):
        locate.folder_of("no-such-thing")


def test_the_writer_appends_whole_lines_once_flushed(tmp_path):
    writer = records.Writer(tmp_path / records.file_name(0))
    writer.add(records.part_line(records.PartInfo(1, 0, 1, "h", 1, None, 0, 5, 0.0, 0.0, 1,
                                                  False)))
    writer.add(records.step_line(1, 4, 0, 10, [("data", 0, 3)]))
    assert not writer.path.exists() and writer.pending == 2
    writer.flush()
    writer.add(records.end_line(20, 1, 0.0, 0.0))
    writer.close()
    parts = records.read_file(writer.path)
    assert parts[0].ended and parts[0].steps[0].phases == {"data": (0, 3)}
    assert records.parts_in(writer.path) == 1


class FakeNvtx:
    def __init__(self):
        self.calls = []

    def RangePush(self, name):  # noqa: N802 (CuPy's names)
        self.calls.append(("push", name))

    def RangePop(self):  # noqa: N802
        self.calls.append(("pop",))


def test_nvtx_ranges_push_and_pop_in_pairs():
    """The NVTX path (a GPU's): CuPy's nvtx module is faked, as no GPU is here."""
    nvtx = FakeNvtx()
    ranges = gpu.Ranges(nvtx)
    ranges.push("step")
    ranges.push("data")
    ranges.pop()
    ranges.push("compute")
    ranges.close()  # an exception cut the step short
    ranges.pop()  # nothing left: no unmatched pop
    assert nvtx.calls == [("push", "step"), ("push", "data"), ("pop",), ("push", "compute"),
                          ("pop",), ("pop",)]
    assert gpu.synchronizer(False) is None
    assert not gpu.on_gpu(None) and not gpu.on_gpu(type("D", (), {"xp": numpy})())
