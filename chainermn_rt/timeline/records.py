"""The timeline's record files: one per rank in the run's folder, JSON Lines, append-only.

``FOLDER/rank-00003.jsonl`` holds rank 3's records. Every start of the program (the first run,
and each requeued run of the same job: ``SLURM_RESTART_COUNT``) appends a *part*: a ``part``
line, then one ``step`` line per recorded step, then, when training ended normally, an ``end``
line. Times are whole microseconds from the part's origin (``origin_ns``: the rank's wall
clock, in ns since the epoch, when the part began); a rank's clock offset against rank 0's
(``offset_us``, to add) was estimated at the start and, in ``end``, again at the end::

    {"kind":"part","format":1,"part":1,"rank":0,"size":2,"host":"node1","pid":812,"job":"42",
     "restart":0,"origin_ns":1767225600000000000,"clock":{"offset_us":0.0,"rtt_us":0.0},
     "every":1,"sync":false,"staged":false}
    {"kind":"step","it":1,"n":100,"b":31,"e":5120,"ph":[["data",31,240],["compute",240,4010],
     ["exchange",4010,4950],["update",4950,5090],["ext:validation",5095,5118]]}
    {"kind":"end","at_us":90210,"steps":600,"clock":{"offset_us":0.0,"rtt_us":0.0}}

``it``: the iteration (after the update); ``n``: the samples of the rank's batch; ``b``/``e``:
the step (update and extensions); ``ph``: its phases, each ``[name, begin, end]``, named
``data`` (the iterator's ``next``), ``compute`` (from the batch to the exchange: the copy to the
device, forward and backward), ``exchange`` (the gradient allreduce, or the first iteration's
broadcast), ``update`` (the optimizer's step) and ``ext:NAME`` (an extension that ran).
``staged``: the job staged its data on the nodes (``render --stage``; absent in older files:
false), which the slow-node rule reads.

>>> import io
>>> text = part_line(PartInfo(1, 0, 1, "n1", 7, None, 0, 10**18, 0.0, 0.0, 1, False)) + \\
...     step_line(3, 8, 0, 9, [("data", 0, 2), ("compute", 2, 9)])
>>> parts = parse_lines(io.BytesIO(text.encode()), "rank-00000.jsonl")
>>> parts[0].info.host, parts[0].steps[0].phases["compute"], parts[0].ended
('n1', (2, 9), False)
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from chainermn_rt.rank_contract import TIMELINE_VAR

# what a command that finds no records says
HOW_TO = (f"turn the timeline on: `chainermn-rt render/submit --timeline`, the environment "
          f"variable {TIMELINE_VAR}=FOLDER, or chainermn_rt.timeline(trainer, comm, "
          f"directory=FOLDER) before trainer.run() (docs/timeline.md)")

FORMAT = 1
_FILE = re.compile(r"rank-(\d{5,})\.jsonl\Z")
# the phases a step may hold besides extensions (``ext:NAME``)
PHASES = ("data", "compute", "exchange", "update")
EXTENSION = "ext:"
MAX_LINE = 1 << 16  # bytes: a longer line is damage (a step line is ~200 bytes)


def file_name(rank: int) -> str:
    """A rank's file in the run's folder.

    >>> file_name(3)
    'rank-00003.jsonl'
    """
    return f"rank-{rank:05d}.jsonl"


def rank_of(name: str) -> int | None:
    m = _FILE.match(name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class PartInfo:
    """What a part's first line says."""

    part: int
    rank: int
    size: int
    host: str
    pid: int
    job: str | None
    restart: int
    origin_ns: int
    offset_us: float
    rtt_us: float
    every: int
    sync: bool
    staged: bool = False  # the job's data staged on the nodes


@dataclass(frozen=True)
class Step:
    iteration: int
    samples: int
    begin: int
    end: int
    phases: dict[str, tuple[int, int]]  # name -> (begin, end), in the order recorded


@dataclass
class Part:
    info: PartInfo
    steps: list[Step] = field(default_factory=list)
    ended: bool = False  # an end line: training finished normally
    end_at_us: int | None = None
    end_offset_us: float | None = None
    end_rtt_us: float | None = None


class RecordError(ValueError):
    """A damaged record file: ``str()`` names the file, the line and what is wrong; ``parts``
    holds what was read before the damage."""

    def __init__(self, message: str, parts: list[Part]):
        super().__init__(message)
        self.parts = parts


def _dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":")) + "\n"


def part_line(info: PartInfo) -> str:
    return _dumps({"kind": "part", "format": FORMAT, "part": info.part, "rank": info.rank,
                   "size": info.size, "host": info.host, "pid": info.pid, "job": info.job,
                   "restart": info.restart, "origin_ns": info.origin_ns,
                   "clock": {"offset_us": info.offset_us, "rtt_us": info.rtt_us},
                   "every": info.every, "sync": info.sync, "staged": info.staged})


def step_line(iteration: int, samples: int, begin: int, end: int,
              phases: list[tuple[str, int, int]]) -> str:
    return _dumps({"kind": "step", "it": iteration, "n": samples, "b": begin, "e": end,
                   "ph": [list(p) for p in phases]})


def end_line(at_us: int, steps: int, offset_us: float, rtt_us: float) -> str:
    return _dumps({"kind": "end", "at_us": at_us, "steps": steps,
                   "clock": {"offset_us": offset_us, "rtt_us": rtt_us}})


def parts_in(path: Path) -> int:
    """How many parts ``path`` holds already (its ``part`` lines); 0 when it does not exist.
    A new part's number is one more."""
    try:
        with open(path, "rb") as f:
            return sum(1 for line in f if line.startswith(b'{"kind":"part"'))
    except FileNotFoundError:
        return 0


class Writer:
    """Appends lines to one rank's file, batched: :meth:`add` keeps them in memory,
    :meth:`flush` writes what is kept with one ``write`` of whole lines, so a rank that is
    killed loses at most what it kept and leaves no half line but in a write cut short by the
    kill itself."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lines: list[str] = []
        self._fd: int | None = None

    @property
    def pending(self) -> int:
        return len(self._lines)

    def add(self, line: str) -> None:
        self._lines.append(line)

    def flush(self) -> None:
        if not self._lines:
            return
        data = "".join(self._lines).encode()
        self._lines.clear()
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                               0o666)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


# --- reading -----------------------------------------------------------------------------------

def _whole(value, name: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} is {value!r}; allowed: a whole number >= {low}")
    return value


def _number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or abs(value) > 1e15:
        raise ValueError(f"{name} is {value!r}; allowed: a finite number")
    return float(value)


def _clock(obj, name: str) -> tuple[float, float]:
    if not isinstance(obj, dict):
        raise ValueError(f"{name} is {obj!r}; allowed: {{\"offset_us\": ..., \"rtt_us\": ...}}")
    rtt = _number(obj.get("rtt_us"), f"{name}.rtt_us")
    if rtt < 0:
        raise ValueError(f"{name}.rtt_us is {rtt}; allowed: >= 0")
    return _number(obj.get("offset_us"), f"{name}.offset_us"), rtt


def _part(obj: dict) -> PartInfo:
    if obj.get("format") != FORMAT:
        raise ValueError(f"format is {obj.get('format')!r}; allowed: {FORMAT} (written by "
                         "another version of chainermn-rt?)")
    host, job = obj.get("host"), obj.get("job")
    if not isinstance(host, str) or not host or len(host) > 255:
        raise ValueError(f"host is {host!r}; allowed: a host name")
    if job is not None and (not isinstance(job, str) or len(job) > 64):
        raise ValueError(f"job is {job!r}; allowed: a job id or null")
    size = _whole(obj.get("size"), "size", 1)
    rank = _whole(obj.get("rank"), "rank")
    if rank >= size:
        raise ValueError(f"rank {rank} is not below size {size}")
    sync = obj.get("sync")
    if not isinstance(sync, bool):
        raise ValueError(f"sync is {sync!r}; allowed: true or false")
    staged = obj.get("staged", False)
    if not isinstance(staged, bool):
        raise ValueError(f"staged is {staged!r}; allowed: true or false")
    offset, rtt = _clock(obj.get("clock"), "clock")
    return PartInfo(_whole(obj.get("part"), "part", 1), rank, size, host,
                    _whole(obj.get("pid"), "pid"), job, _whole(obj.get("restart"), "restart"),
                    _whole(obj.get("origin_ns"), "origin_ns"), offset, rtt,
                    _whole(obj.get("every"), "every", 1), sync, staged)


def _step(obj: dict, after: int) -> Step:
    begin, end = _whole(obj.get("b"), "b"), _whole(obj.get("e"), "e")
    if not after <= begin <= end:
        raise ValueError(f"step times b={begin}, e={end} go backwards (the last step ended at "
                         f"{after})")
    phases: dict[str, tuple[int, int]] = {}
    raw = obj.get("ph")
    if not isinstance(raw, list):
        raise ValueError(f"ph is {raw!r}; allowed: a list of [name, begin, end]")
    for item in raw:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)):
            raise ValueError(f"phase {item!r}; allowed: [name, begin, end]")
        name = item[0]
        if name not in PHASES and not (name.startswith(EXTENSION) and 4 < len(name) <= 128):
            raise ValueError(f"phase name {name!r}; allowed: {', '.join(PHASES)} or ext:NAME")
        b, e = _whole(item[1], f"{name} begin"), _whole(item[2], f"{name} end")
        if not begin <= b <= e <= end:
            raise ValueError(f"phase {name} [{b}, {e}] lies outside its step [{begin}, {end}]")
        phases[name] = (b, e)
    return Step(_whole(obj.get("it"), "it"), _whole(obj.get("n"), "n"), begin, end, phases)


def parse_lines(stream, name: str) -> list[Part]:
    """The parts of one rank's file (a binary stream); :class:`RecordError` at the first
    damaged line (its message: ``NAME: line N: what``), holding the parts before it."""
    parts: list[Part] = []
    number = 0
    while True:
        line = stream.readline(MAX_LINE + 1)
        if not line:
            return parts
        number += 1
        try:
            if len(line) > MAX_LINE:
                raise ValueError(f"longer than {MAX_LINE} bytes")
            if not line.endswith(b"\n"):
                raise ValueError("cut short (no newline at its end: the rank was killed while "
                                 "writing, or the file was truncated)")
            try:
                obj = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise ValueError(f"not JSON ({err})") from None
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            kind = obj.get("kind")
            if kind == "part":
                info = _part(obj)
                if parts and info.rank != parts[0].info.rank:
                    raise ValueError(f"rank {info.rank} in the file of rank "
                                     f"{parts[0].info.rank}")
                parts.append(Part(info))
            elif not parts:
                raise ValueError(f"a {kind!r} line before any part line")
            elif parts[-1].ended:
                raise ValueError(f"a {kind!r} line after the part's end line")
            elif kind == "step":
                last = parts[-1].steps[-1].end if parts[-1].steps else 0
                parts[-1].steps.append(_step(obj, last))
            elif kind == "end":
                p = parts[-1]
                p.end_at_us = _whole(obj.get("at_us"), "at_us")
                _whole(obj.get("steps"), "steps")
                p.end_offset_us, p.end_rtt_us = _clock(obj.get("clock"), "clock")
                p.ended = True
            else:
                raise ValueError(f"kind is {kind!r}; allowed: part, step, end")
        except ValueError as err:
            raise RecordError(f"{name}: line {number}: {err}", parts) from None


def read_file(path: Path) -> list[Part]:
    """The parts of one rank's file; :class:`RecordError` when it is damaged (OSError when it
    cannot be read)."""
    with open(path, "rb") as f:
        parts = parse_lines(f, str(path))
    if not parts:
        raise RecordError(f"{path}: empty (no part line)", [])
    return parts
