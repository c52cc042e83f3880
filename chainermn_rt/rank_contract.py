"""What a job script hands its per-rank step: the variables' names and the slot table's format.

The Plan writes the node's slot table into the script with :func:`dump_slots`;
``chainermn-rt rank`` reads it back with :func:`load_slots`. Both sides use only this module.

>>> text = dump_slots([Slot(gpu=0, numa=0, cpus="0-3", hcas=("mlx5_0:1",))])
>>> text
'[{"gpu":0,"numa":0,"cpus":"0-3","hcas":["mlx5_0:1"]}]'
>>> load_slots(text)[0].cpu_ids
[0, 1, 2, 3]
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from chainermn_rt.errors import UserError, message_value
from chainermn_rt.slurm_records import MAX_CPUS_PER_NODE

# The node's slot table (JSON), written into the script by the Plan.
SLOTS_VAR = "CHAINERMN_RT_SLOTS"
# A file pattern: each rank's output goes there (``--per-rank-logs`` sets it).
RANK_LOG_VAR = "CHAINERMN_RT_RANK_LOG"
RANK_LOG_PATTERN = "%x-%j.rank%r.out"
# "1": each rank prints one line saying where it runs.
VERBOSE_VAR = "CHAINERMN_RT_VERBOSE"
# "0": an uncaught exception on a rank no longer aborts the whole job (abort_on_error).
ABORT_ON_ERROR_VAR = "CHAINERMN_RT_ABORT_ON_ERROR"
# A file the batch shell creates when its time-limit or preemption signal comes: rank 0 of a
# program using chainermn_rt.resumable then has every rank write a snapshot and stop, and
# writes STOP_FILE + STOP_DONE_SUFFIX (holding the snapshot's folder) for the shell to requeue.
STOP_FILE_VAR = "CHAINERMN_RT_STOP_FILE"
STOP_DONE_SUFFIX = ".done"
# Rank 0 of such a program creates STOP_FILE + STOP_READY_SUFFIX when it starts: a stop that gets
# no snapshot in time still requeues the job, which resumes from the snapshot before.
STOP_READY_SUFFIX = ".resumable"
# The stall watchdog (chainermn_rt.watchdog): seconds a collective may wait for a rank (0: off),
# "abort" or "warn" when it does, seconds a rank may go silent while others wait (dead, node
# lost), and seconds MPI's start-up may take (0: no limit).
STALL_TIMEOUT_VAR = "CHAINERMN_RT_STALL_TIMEOUT"
SILENT_TIMEOUT_VAR = "CHAINERMN_RT_SILENT_TIMEOUT"
# The rank's process id, set by the per-rank step before it execs COMMAND: the start-up limit
# applies to that process only, not to the Python processes it starts (data loaders).
RANK_PID_VAR = "CHAINERMN_RT_RANK_PID"
STALL_ACTION_VAR = "CHAINERMN_RT_STALL_ACTION"
START_TIMEOUT_VAR = "CHAINERMN_RT_START_TIMEOUT"

# The step timeline (chainermn_rt.timeline, docs/timeline.md): the run's record folder, which
# `render --timeline` sets to TIMELINE_FOLDER/<job id> in the job's working folder; and the
# node_exporter textfile-collector folder rank 0 writes the job's metrics into (the profile's
# metrics_textfile_dir).
TIMELINE_VAR = "CHAINERMN_RT_TIMELINE"
TIMELINE_FOLDER = "timeline"
METRICS_DIR_VAR = "CHAINERMN_RT_METRICS_DIR"
# Host folders bound into the container (the host's MPI, fabric provider, NCCL plugin:
# interconnect.py): the rank step puts them first on LD_LIBRARY_PATH before COMMAND starts.
HOST_LIBS_VAR = "CHAINERMN_RT_HOST_LIBS"

# Staging (chainermn_rt.staging, `render --stage`): the node-local folder of this job's copies,
# and the staged folders (a JSON list). The job ids Slurm lists for the user when the copy step
# starts: the copy step removes other jobs' folders that a kill (time limit, scancel) left on
# its node (stage_copy.sweep).
STAGE_DIR_VAR = "CHAINERMN_RT_STAGE_DIR"
STAGE_FROM_VAR = "CHAINERMN_RT_STAGE_FROM"
STAGE_LIVE_JOBS_VAR = "CHAINERMN_RT_STAGE_LIVE_JOBS"

# The settings above that a rank reads from its environment: name -> (parse, what is allowed).
# A profile's [environment] and `render --env` are checked with them before a job is submitted;
# the per-rank step and setup() check them again before anything starts (check_settings).
_SECONDS_OR_OFF = "seconds, 1-604800, or 0 (off)"


def _seconds_or_off(text: str) -> float:
    value = float(text)  # ValueError for anything else
    if math.isnan(value) or not (value == 0 or 1 <= value <= 86400 * 7):
        raise ValueError(text)
    return value


def _one_of(*choices: str):
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text
    return parse


SETTINGS = {
    STALL_TIMEOUT_VAR: (_seconds_or_off, _SECONDS_OR_OFF),
    SILENT_TIMEOUT_VAR: (_seconds_or_off, _SECONDS_OR_OFF),
    START_TIMEOUT_VAR: (_seconds_or_off, _SECONDS_OR_OFF),
    STALL_ACTION_VAR: (_one_of("abort", "warn"), "abort or warn"),
    ABORT_ON_ERROR_VAR: (_one_of("1", "0"), "1 (the default: a failing rank aborts the job) "
                                            "or 0 (off)"),
}


def setting(environ: Mapping[str, str], name: str, default: Any, where: str | None = None):
    """The parsed value of the setting ``name`` in ``environ``, ``default`` when unset or
    empty; a UserError naming it (``where``: the profile field or flag that set it)."""
    text = environ.get(name, "").strip()
    if not text:
        return default
    parse, allowed = SETTINGS[name]
    try:
        return parse(text)
    except ValueError:
        field = f"{where}: {text!r}" if where else f"environment variable {name}={text!r}"
        raise UserError(f"{field}; allowed: {allowed}") from None


def check_settings(environ: Mapping[str, str], where: str | None = None) -> None:
    """Every setting of :data:`SETTINGS` that ``environ`` sets, parsed; the first bad one is a
    UserError. ``where``: a prefix naming the variable's origin (``environment.``, ``--env ``)."""
    for name in SETTINGS:
        setting(environ, name, None, f"{where}{name}" if where else None)


CPU_LIST = re.compile(r"[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*\Z")
CPU_LIST_ALLOWED = (f"a CPU list such as \"0-13,56-69\" (ranges low-high, CPUs "
                    f"0-{MAX_CPUS_PER_NODE - 1})")
HCA = re.compile(r"[A-Za-z0-9_.-]{1,64}:[0-9]{1,3}\Z")
HCA_ALLOWED = "an HCA with its port, e.g. \"mlx5_0:1\""


def parse_cpu_list(text: str) -> list[int]:
    """``"0-3,8"`` -> ``[0, 1, 2, 3, 8]``; ValueError for anything else: a reversed range
    (``7-0``), a CPU past ``MAX_CPUS_PER_NODE - 1``, more CPUs than a node has.

    >>> parse_cpu_list("7-0")
    Traceback (most recent call last):
    ValueError: '7-0' is not a CPU list (7-0 is reversed); allowed: a CPU list such as \
"0-13,56-69" (ranges low-high, CPUs 0-65535)
    """
    if not isinstance(text, str) or not CPU_LIST.match(text):
        raise ValueError(f"{_shown(text)} is not a CPU list; allowed: {CPU_LIST_ALLOWED}")
    spans, total = [], 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        spans.append((a, b))
        total += b - a + 1
        why = f"{part} is reversed" if a > b else f"CPU {b} is past {MAX_CPUS_PER_NODE - 1}" \
            if b >= MAX_CPUS_PER_NODE else f"more than {MAX_CPUS_PER_NODE} CPUs" \
            if total > MAX_CPUS_PER_NODE else None
        if why:
            raise ValueError(f"{_shown(text)} is not a CPU list ({why}); allowed: "
                             f"{CPU_LIST_ALLOWED}")
    return [c for a, b in spans for c in range(a, b + 1)]


def _shown(value: Any) -> str:
    """``repr(value)``, cut short (a CPU list from a file may be of any length)."""
    return message_value(value, 60, quote=True) if isinstance(value, str) else repr(value)


@dataclass(frozen=True)
class Slot:
    """Where one rank of a node runs: its GPU (None on CPU nodes), NUMA node, CPUs and HCAs."""

    gpu: int | None
    numa: int
    cpus: str  # a CPU list, as written in the profile
    hcas: tuple[str, ...] = ()

    @property
    def cpu_ids(self) -> list[int]:
        return parse_cpu_list(self.cpus)

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "numa": self.numa, "cpus": self.cpus, "hcas": list(self.hcas)}

    @classmethod
    def from_json(cls, data: Any) -> Slot:
        """The inverse of :meth:`to_json`; ValueError naming the first bad key."""
        keys = ("gpu", "numa", "cpus", "hcas")
        if not isinstance(data, dict) or set(data) != set(keys):
            raise ValueError(f"{data!r}: allowed: an object with the keys {', '.join(keys)}")
        gpu, numa, cpus, hcas = (data[k] for k in keys)
        if gpu is not None and not _index(gpu):
            raise ValueError(f"gpu: {gpu!r}; allowed: null or an integer >= 0")
        if not _index(numa):
            raise ValueError(f"numa: {numa!r}; allowed: an integer >= 0")
        parse_cpu_list(cpus)
        if not isinstance(hcas, list) or not all(isinstance(h, str) and HCA.match(h)
                                                 for h in hcas):
            raise ValueError(f"hcas: {hcas!r}; allowed: a list of {HCA_ALLOWED}")
        return cls(gpu=gpu, numa=numa, cpus=cpus, hcas=tuple(hcas))


def _index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def dump_slots(slots: Iterable[Slot]) -> str:
    """The value of ``CHAINERMN_RT_SLOTS``: compact JSON, one object per slot."""
    return json.dumps([s.to_json() for s in slots], separators=(",", ":"))


def load_slots(text: str) -> tuple[Slot, ...]:
    """Read ``CHAINERMN_RT_SLOTS``; a bad value is a UserError naming the variable."""
    try:
        data = json.loads(text)
        if not isinstance(data, list):
            raise ValueError("not a list")
        return tuple(Slot.from_json(item) for item in data)
    except ValueError as err:  # json.JSONDecodeError is a ValueError
        raise UserError(f"{SLOTS_VAR}: {err}; allowed: the JSON list of slots that "
                        "chainermn-rt render writes") from None


def library_path(environ: Mapping[str, str]) -> str | None:
    """The rank step's LD_LIBRARY_PATH: :data:`HOST_LIBS_VAR`'s folders first, then what the
    image had; None when the job binds none.

    >>> library_path({HOST_LIBS_VAR: "/h/lib", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"})
    '/h/lib:/usr/local/cuda/lib64'
    """
    first = environ.get(HOST_LIBS_VAR)
    if not first:
        return None
    rest = [p for p in environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    return ":".join(dict.fromkeys([*first.split(":"), *rest]))
