"""Record files for the timeline's tests, written by the recorder's own line writers from step
durations a test chooses (microseconds), with each rank's clock offset and origin; the check of
a trace against the Chrome trace-event format."""

from __future__ import annotations

from pathlib import Path

import numpy

from chainermn_rt.timeline import records

ORIGIN_NS = 1_767_225_600_000_000_000  # 2026-01-01, rank 0's clock at every part's start


def write_run(folder: Path, compute: numpy.ndarray, *, exchange: numpy.ndarray | None = None,
              data: float | numpy.ndarray = 100, update: float = 50, ext: float = 0,
              samples: int = 32, skew_us: dict[int, float] | None = None,
              hosts: dict[int, str] | None = None, part: int = 1, restart: int = 0,
              ended: bool = True, first_iteration: int = 1, rtt_us: float = 0.0,
              later_s: float = 0.0, staged: bool = False) -> None:
    """One part per rank: steps of ``data`` (a number, or ranks x steps), ``compute[r, s]``, an
    exchange (default: the wait for the slowest rank's arrival plus 200 us), ``update`` and,
    given ``ext``, an extension ``ext:log`` after it, all ranks starting each step together on
    rank 0's clock. Rank r's clock reads ``skew_us[r]`` ahead: its stamps and origin carry the
    skew and its part line the offset that corrects it. ``later_s``: the part starts that much
    after ORIGIN_NS (a requeued run's). ``staged``: the part lines say the data was staged."""
    folder.mkdir(parents=True, exist_ok=True)
    ranks, steps = compute.shape
    skew_us = skew_us or {}
    hosts = hosts or {r: f"node{r // 2 + 1}" for r in range(ranks)}
    data = numpy.broadcast_to(numpy.asarray(data, dtype=float), compute.shape)
    arrive = data + compute
    if exchange is None:
        exchange = arrive.max(axis=0) - arrive + 200
    for r in range(ranks):
        skew = skew_us.get(r, 0.0)
        origin = ORIGIN_NS + int(later_s * 1e9) + int(skew * 1000)
        lines = [records.part_line(records.PartInfo(
            part, r, ranks, hosts[r], 1000 + r, "42", restart, origin, -skew, rtt_us, 1,
            False, staged))]
        t = 10.0  # rank 0's clock, us since the origin
        for s in range(steps):
            b = int(t)
            d = b + int(data[r, s])
            c = d + int(compute[r, s])
            x = c + int(exchange[r, s])
            u = x + int(update)
            phases = [("data", b, d), ("compute", d, c), ("exchange", c, x), ("update", x, u)]
            if ext:
                phases.append(("ext:log", u, u + int(ext)))
            lines.append(records.step_line(first_iteration + s, samples, b, u + int(ext) + 5,
                                           phases))
            t = max(data[:, s] + compute[:, s] + exchange[:, s]) + update + ext + 20 + t
        if ended:
            lines.append(records.end_line(int(t) + 10, steps, -skew, rtt_us))
        with open(folder / records.file_name(r), "a") as f:
            f.write("".join(lines))


# --- the Chrome trace-event format ----------------------------------------------------------
# https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU (the spec
# Perfetto's JSON importer follows): an object with "traceEvents"; every event has name, ph,
# pid, tid; timed ones ts in microseconds; "X" complete events a dur; "B"/"E" pairs match;
# "i" instant events a scope s of g, p or t; "M" metadata events name their process or thread.
PHASES = {"X", "B", "E", "i", "I", "M"}


def check_trace(trace: dict) -> list[dict]:
    """Every rule above; returns the timed events."""
    assert set(trace) >= {"traceEvents"} and isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    timed = []
    for e in trace["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in PHASES, e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index",
                                 "thread_sort_index"), e
            assert isinstance(e["args"], dict), e
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        if e["ph"] in ("i", "I"):
            assert e.get("s", "t") in ("g", "p", "t"), e
        timed.append(e)
    threads: dict[tuple[int, int], list[dict]] = {}
    for e in timed:
        threads.setdefault((e["pid"], e["tid"]), []).append(e)
    for events in threads.values():
        stamps = [e["ts"] for e in events]
        assert stamps == sorted(stamps), "ts goes backwards within a thread"
        stack: list[float] = []  # ends of the open X events, and B's
        for e in events:
            while stack and stack[-1] <= e["ts"] and e["ph"] != "E":
                stack.pop()
            if e["ph"] == "X":
                assert not stack or e["ts"] + e["dur"] <= stack[-1], f"{e} overlaps its parent"
                stack.append(e["ts"] + e["dur"])
        begins = sum(e["ph"] == "B" for e in events)
        assert begins == sum(e["ph"] == "E" for e in events), "unmatched B/E"
    return timed
