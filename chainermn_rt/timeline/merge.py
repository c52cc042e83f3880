"""The ranks' record files, read together: aligned to rank 0's clock, as per-step tables
(:func:`tables`) and as one trace in the Chrome trace-event format (:func:`trace`), which
Perfetto's UI and ``chrome://tracing`` open.

Clock alignment: a part's stamp ``t`` (microseconds since its origin) is rank 0's time
``origin_ns / 1000 + t + offset(t)``, ``offset`` going linearly from the start's estimate to
the end's over the part (the start's alone for a part with no end line: a crash).

The trace: a process per node (``pid``: the node's number, named by its host), a thread per
rank (``tid``: the rank), each step an ``X`` (complete) event with its phases nested inside,
``ts`` and ``dur`` in microseconds from the run's first stamp; a part's start (a requeued
run's second part, ...) and a part cut short are instant events on the rank's thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy

from chainermn_rt.errors import UserError
from chainermn_rt.timeline import records
from chainermn_rt.timeline.records import HOW_TO
from chainermn_rt.timeline.straggler import WARMUP, Judge, slowest


@dataclass
class Run:
    """A folder's records: rank -> its parts, and what was damaged (``--partial``)."""

    folder: Path
    parts: dict[int, list[records.Part]]
    damaged: list[str]

    @property
    def size(self) -> int:
        return max(p.info.size for parts in self.parts.values() for p in parts)

    def hosts(self) -> dict[int, str]:
        """Each rank's host in its last part."""
        return {r: parts[-1].info.host for r, parts in self.parts.items()}

    def clock_bound_us(self) -> float:
        """The largest error the alignment can have (half the best round trip, any part)."""
        bounds = [p.info.rtt_us / 2 for parts in self.parts.values() for p in parts]
        bounds += [p.end_rtt_us / 2 for parts in self.parts.values() for p in parts
                   if p.end_rtt_us is not None]
        return max(bounds, default=0.0)


def load(folder: Path, partial: bool = False) -> Run:
    """Every rank's file in ``folder``. A damaged or missing one is a UserError (one line
    naming the file and what is wrong), or with ``partial`` left out (its lines before the
    damage kept) and named in ``Run.damaged``. No records at all: a UserError saying how to
    turn the timeline on."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"JOB_OR_FOLDER: {folder} is not a folder; allowed: a timeline folder "
                        "or a job id")
    files = sorted((r, p) for p in folder.iterdir()
                   if (r := records.rank_of(p.name)) is not None)
    if not files:
        raise UserError(f"JOB_OR_FOLDER: {folder} holds no timeline records "
                        f"(rank-NNNNN.jsonl); {HOW_TO}")
    parts: dict[int, list[records.Part]] = {}
    damaged: list[str] = []

    def damage(message: str) -> None:
        if not partial:
            raise UserError(f"{message} (--partial merges the rest)")
        damaged.append(message)

    for rank, path in files:
        try:
            found = records.read_file(path)
        except records.RecordError as err:
            damage(str(err))
            found = err.parts
        except OSError as err:
            damage(f"{path}: {err.strerror}")
            found = []
        if found and found[0].info.rank != rank:
            damage(f"{path}: holds rank {found[0].info.rank}'s records")
            continue
        if found:
            parts[rank] = found
    if not parts:
        raise UserError(f"JOB_OR_FOLDER: {folder}: no record file could be read; allowed: "
                        "a folder with at least one undamaged rank file")
    size = max(p.info.size for ps in parts.values() for p in ps)
    for rank in range(size):
        if rank not in parts:
            damage(f"{folder / records.file_name(rank)}: missing (the run had {size} ranks)")
    for rank in sorted(parts):
        if rank >= size:
            damage(f"{folder / records.file_name(rank)}: rank {rank} in a run of {size} ranks")
            del parts[rank]
    return Run(folder, parts, damaged)


def aligned(part: records.Part, local_us: numpy.ndarray | float):
    """Stamps of ``part`` as rank 0's time, microseconds since the epoch."""
    info = part.info
    offset = info.offset_us
    if part.end_offset_us is not None and part.end_at_us:
        offset = offset + (part.end_offset_us - offset) * (numpy.asarray(local_us)
                                                           / part.end_at_us)
    return info.origin_ns / 1000 + local_us + offset


# --- per-step tables -----------------------------------------------------------------------

@dataclass
class Tables:
    """Steps every rank recorded (in every part), ranks x steps: durations in seconds of each
    phase (``ext`` = all extensions) and of the step, samples, and the step's end on rank 0's
    clock (seconds since the run's first stamp); ``index``: the step's place in its part."""

    ranks: int
    iteration: numpy.ndarray  # steps
    part: numpy.ndarray  # steps
    index: numpy.ndarray  # steps
    end_s: numpy.ndarray  # steps: rank 0's
    phases: dict[str, numpy.ndarray]  # name -> ranks x steps (data, compute, exchange, update, ext)
    step: numpy.ndarray  # ranks x steps
    samples: numpy.ndarray  # ranks x steps
    start_s: float  # the run's first stamp (rank 0's clock, seconds since the epoch)
    staged: bool = False  # the job's data staged on the nodes (every part says so)

    def judge(self) -> Judge:
        """The straggler rule over these steps (the first WARMUP of each part left out)."""
        judge = Judge(self.ranks, self.staged)
        keep = self.index >= WARMUP
        judge.add(self.phases["compute"][:, keep], self.own()[:, keep], self.step[:, keep],
                  **{name: self.phases[name][:, keep] for name in ("data", "update", "ext")})
        return judge

    def slowest(self) -> numpy.ndarray:
        """Per step, the rank the others waited for (-1 with one rank)."""
        if self.ranks < 2:
            return numpy.full(len(self.iteration), -1)
        return slowest(self.own())

    def own(self) -> numpy.ndarray:
        """Each rank's work outside the exchange, ranks x steps."""
        return self.step - self.phases["exchange"]


def tables(run: Run) -> Tables:
    """The steps of ``run`` that every rank it has records of recorded."""
    ranks = sorted(run.parts)
    keyed: list[dict[tuple[int, int], tuple]] = []
    start = min(float(aligned(p, p.steps[0].begin)) for ps in run.parts.values() for p in ps
                if p.steps) if any(p.steps for ps in run.parts.values() for p in ps) else 0.0
    for rank in ranks:
        rows = {}
        for part in run.parts[rank]:
            for i, s in enumerate(part.steps):
                rows[(part.info.part, s.iteration)] = (part, i, s)
        keyed.append(rows)
    common = sorted(set.intersection(*(set(k) for k in keyed)))
    n = len(common)
    names = (*records.PHASES, "ext")
    phases = {name: numpy.zeros((len(ranks), n)) for name in names}
    step = numpy.zeros((len(ranks), n))
    samples = numpy.zeros((len(ranks), n))
    index = numpy.zeros(n, dtype=int)
    end_s = numpy.zeros(n)
    for r, rows in enumerate(keyed):
        for j, key in enumerate(common):
            part, i, s = rows[key]
            for name, (b, e) in s.phases.items():
                phase = name if name in phases else "ext"
                phases[phase][r, j] += (e - b) / 1e6
            step[r, j] = (s.end - s.begin) / 1e6
            samples[r, j] = s.samples
            if r == 0:
                index[j] = i
                end_s[j] = (float(aligned(part, s.end)) - start) / 1e6
    return Tables(len(ranks), numpy.array([k[1] for k in common], dtype=int),
                  numpy.array([k[0] for k in common], dtype=int), index, end_s, phases, step,
                  samples, start / 1e6,
                  all(p.info.staged for ps in run.parts.values() for p in ps))


# --- the trace ---------------------------------------------------------------------------------

def trace(run: Run) -> dict:
    """The Chrome trace-event JSON object of ``run``."""
    hosts: list[str] = []
    for rank in sorted(run.parts):
        for part in run.parts[rank]:
            if part.info.host not in hosts:
                hosts.append(part.info.host)
    pid_of = {h: i + 1 for i, h in enumerate(hosts)}
    stamps = [float(aligned(p, p.steps[0].begin if p.steps else 0))
              for ps in run.parts.values() for p in ps]
    zero = min(stamps)
    events: list[dict] = []
    for host, pid in pid_of.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": host}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
    named: set[tuple[int, int]] = set()
    timed: list[dict] = []
    for rank in sorted(run.parts):
        for part in run.parts[rank]:
            pid = pid_of[part.info.host]
            if (pid, rank) not in named:
                named.add((pid, rank))
                events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": rank,
                               "args": {"name": f"rank {rank}"}})
                events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": rank,
                               "args": {"sort_index": rank}})
            timed.extend(_part_events(part, pid, rank, zero))
    timed.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], -e.get("dur", 0)))
    return {"traceEvents": events + timed, "displayTimeUnit": "ms",
            "otherData": {"folder": str(run.folder), "ranks": run.size,
                          "clock_alignment": f"offsets applied; error at most "
                                             f"{run.clock_bound_us():.0f} us",
                          "damaged": run.damaged}}


def _us(value) -> int:
    """Whole microseconds: rounding keeps the order of stamps, so phases stay inside their
    step."""
    return int(round(float(value)))


def _part_events(part: records.Part, pid: int, rank: int, zero: float) -> list[dict]:
    info = part.info
    at = lambda local: _us(aligned(part, local) - zero)  # noqa: E731
    first = part.steps[0].begin if part.steps else 0
    label = f"part {info.part}" + (f" (requeued: restart {info.restart})" if info.restart else
                                   "")
    out = [{"name": label, "ph": "i", "s": "t", "pid": pid, "tid": rank, "ts": at(first),
            "cat": "part", "args": {"host": info.host, "pid": info.pid, "job": info.job,
                                    "clock_offset_us": info.offset_us,
                                    "clock_rtt_us": info.rtt_us}}]
    for s in part.steps:
        b = at(s.begin)
        out.append({"name": "step", "ph": "X", "cat": "step", "pid": pid, "tid": rank,
                    "ts": b, "dur": max(at(s.end) - b, 0),
                    "args": {"iteration": s.iteration, "samples": s.samples, "part": info.part}})
        for name, (pb, pe) in s.phases.items():
            t = at(pb)
            out.append({"name": name, "ph": "X", "cat": "phase", "pid": pid, "tid": rank,
                        "ts": t, "dur": max(at(pe) - t, 0),
                        "args": {"iteration": s.iteration}})
    if not part.ended:
        last = part.steps[-1].end if part.steps else first
        out.append({"name": "ended without an end line (crashed, killed or stopped)",
                    "ph": "i", "s": "t", "cat": "part", "pid": pid, "tid": rank,
                    "ts": at(last), "args": {"part": info.part}})
    return out
