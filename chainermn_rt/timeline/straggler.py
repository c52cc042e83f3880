"""The slow node: one that costs the job time by its own slowness. The rule names a rank (and
its host, for ``--exclude-from``) only when both hold: the others wait for it, and its own
phases are slower than its peers'.

For each rank, over every step recorded after the first :data:`WARMUP` of each part (the first
update is a broadcast, the first steps tune and warm caches), medians over the steps of:

- its *wait*: its work outside the exchange (the step less the exchange: data wait, compute,
  update, extensions) less the median of the other ranks', as a share of the step (the median
  rank's step time): how long the others wait for it at the exchange;
- its *ratio*: its ``compute`` (forward and backward) over the median of the other ranks' in
  the same step;
- each phase's *excess* (``data``, ``compute``, ``update``, ``ext``: all extensions): the
  phase less the median of the other ranks', as a share of the step.

Three outcomes, for a rank with at least :data:`MIN_STEPS` such steps:

- *slow* (named; its host goes to ``slow-nodes.txt`` and to the metrics): the wait at least
  :data:`WAIT_SHARE` (0.15) and its own work slower: the ratio at least :data:`SLOW_RATIO`
  (1.15), or, where the job staged its data on the nodes (``--stage``), its data wait's excess
  at least :data:`WAIT_SHARE`;
- *waited for, not slow*: the wait at least :data:`WAIT_SHARE`, its own work not slower: the
  line says which phase holds the extra time (the one with the largest excess, when that is at
  least half the wait; else no phase of its own holds it: its CPU shared, or the scheduler),
  with no advice;
- *slower, not waited for*: the ratio at least :data:`SLOW_RATIO` but the wait under
  :data:`WAIT_SHARE`: a note, no advice (its slowness costs the job little or no time).

Medians, not means: a rank slowed in a few steps (a garbage collection, rank 0's logging) is
not named; a rank slowed in most steps is. Jitter of up to 5 % on every phase of every rank
moves the ratio to at most 1.105 and the wait (and the data's excess) to at most 0.106 of a
step, below the thresholds. Each rank's own work, not its exchange's duration nor when it
arrived: an exchange also holds local work (packing and scaling the gradients), and on a
loaded core a rank may leave it well after its peers, then arrive late at the next one through
no fault of its own work. The medians come from fixed histograms (:class:`Tally`: 0.35 % bins
for the ratio, 0.25 % of a step for the wait and the data, 1 % for the other phases), so that a
running job (rank 0, window by window) and ``chainermn-rt report`` (all the records) judge
alike with bounded memory.

>>> import numpy
>>> compute = numpy.array([[10.0] * 30, [10.3] * 30, [20.0] * 30])   # rank 2: twice as slow
>>> judge = Judge(3)
>>> judge.add(compute, own=compute + 1, step=numpy.full((3, 30), 21.0))
>>> [v.rank for v in judge.verdicts()]
[2]
>>> print(judge.line({0: "node1", 1: "node1", 2: "node2"})[:90])
chainermn-rt: slow node: rank 2 on node2: compute 1.97x its peers' median, the others wait
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy

SLOW_RATIO = 1.15
WAIT_SHARE = 0.15
MIN_STEPS = 20
WARMUP = 5
SLOW_NODES_FILE = "slow-nodes.txt"
# a rank's own phases besides the exchange, and what the line calls each
OWN_PHASES = {"data": "its data wait", "compute": "its compute",
              "update": "its optimizer's update", "ext": "its extensions"}
ADVICE = f"exclude it with --exclude-from FILE (the timeline's {SLOW_NODES_FILE})"


def median_of_others(values: numpy.ndarray) -> numpy.ndarray:
    """For each (rank, step) of ``values`` (ranks x steps, at least 2 ranks): the median of the
    other ranks' values in that step.

    >>> median_of_others(numpy.array([[1.0], [2.0], [4.0]])).ravel().tolist()
    [3.0, 2.5, 1.5]
    """
    n = values.shape[0]
    order = numpy.argsort(values, axis=0, kind="stable")
    ordered = numpy.take_along_axis(values, order, axis=0)
    position = numpy.empty_like(order)
    numpy.put_along_axis(position, order, numpy.arange(n)[:, None].repeat(values.shape[1], 1),
                         axis=0)

    def kth_of_others(k: int) -> numpy.ndarray:  # the k-th smallest once a rank is left out
        return numpy.take_along_axis(ordered, k + (position <= k), axis=0)

    return (kth_of_others((n - 2) // 2) + kth_of_others((n - 1) // 2)) / 2


def slowest(own: numpy.ndarray) -> numpy.ndarray:
    """Per step, the rank the others waited for: the one with the most work outside the
    exchange.

    >>> slowest(numpy.array([[5.0, 1.0], [1.0, 5.0]])).tolist()
    [0, 1]
    """
    return numpy.argmax(own, axis=0)


class Tally:
    """A fixed histogram of values in [low, high) with bins of ``width`` (values outside count
    in an end bin); its median is a bin's centre."""

    def __init__(self, low: float, high: float, width: float):
        self.low, self.width = low, width
        self.bins = int(round((high - low) / width))
        self.counts = numpy.zeros(self.bins, dtype=numpy.int64)

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def add(self, values: numpy.ndarray) -> None:
        values = values[numpy.isfinite(values)]
        index = numpy.clip(numpy.floor((values - self.low) / self.width), 0, self.bins - 1)
        self.counts += numpy.bincount(index.astype(numpy.int64), minlength=self.bins)

    def median(self) -> float:
        if not self.count:
            return math.nan
        i = int(numpy.searchsorted(numpy.cumsum(self.counts), (self.count + 1) // 2))
        return self.low + (i + 0.5) * self.width


@dataclass(frozen=True)
class Verdict:
    """One rank's scores (medians over the steps) and what the rule makes of them."""

    rank: int
    ratio: float  # its compute over its peers' median
    wait: float  # how long the others wait for it, share of a step
    steps: int
    excess: dict[str, float] = field(default_factory=dict)  # OWN_PHASES -> share of a step
    local_data: bool = False  # the job's data was staged on the nodes

    @property
    def waited(self) -> bool:
        return self.steps >= MIN_STEPS and self.wait >= WAIT_SHARE

    @property
    def slower(self) -> bool:
        return self.steps >= MIN_STEPS and (self.ratio >= SLOW_RATIO or self.slower_data)

    @property
    def slower_data(self) -> bool:
        return self.local_data and self.excess.get("data", 0.0) >= WAIT_SHARE

    @property
    def slow(self) -> bool:
        """Named: the others wait for it, and by its own slowness."""
        return self.waited and self.slower

    def where(self) -> str | None:
        """The phase that holds most of its extra time (at least half the wait), if one
        does.

        >>> Verdict(0, 1.0, 0.2, 50, {"data": 0.0, "compute": 0.01, "ext": 0.18}).where()
        'ext'
        """
        name, most = max(self.excess.items(), key=lambda kv: kv[1], default=(None, 0.0))
        return name if most >= self.wait / 2 else None


class Judge:
    """Per-rank tallies of the rule's scores, fed step by step (or window by window)."""

    def __init__(self, ranks: int, local_data: bool = False):
        self.ranks, self.local_data = ranks, local_data
        self.ratio = [Tally(-4.0, 4.0, 0.005) for _ in range(ranks)]  # log2 of the ratio
        self.wait = [Tally(-1.0, 1.0, 0.0025) for _ in range(ranks)]
        self.excess = {name: [Tally(-1.0, 1.0, 0.0025 if name == "data" else 0.01)
                              for _ in range(ranks)] for name in OWN_PHASES}

    def add(self, compute: numpy.ndarray, own: numpy.ndarray, step: numpy.ndarray, *,
            data: numpy.ndarray | None = None, update: numpy.ndarray | None = None,
            ext: numpy.ndarray | None = None) -> None:
        """Durations of some steps, ranks x steps: the compute, the work outside the exchange
        (the step less the exchange), the step, and the other phases of the work outside the
        exchange (none given: zero); any unit, one for all."""
        if self.ranks < 2 or compute.shape[1] == 0:
            return
        none = numpy.zeros_like(compute)
        phases = {"data": data, "compute": compute, "update": update, "ext": ext}
        phases = {name: none if v is None else v for name, v in phases.items()}
        with numpy.errstate(divide="ignore", invalid="ignore"):
            scale = numpy.median(step, axis=0)
            ratio = numpy.log2(compute / median_of_others(compute))
            wait = (own - median_of_others(own)) / scale
            excess = {name: (values - median_of_others(values)) / scale
                      for name, values in phases.items()}
        for r in range(self.ranks):
            self.ratio[r].add(ratio[r])
            self.wait[r].add(wait[r])
            for name, tallies in self.excess.items():
                tallies[r].add(excess[name][r])

    def scores(self) -> list[Verdict]:
        """Every rank's scores (none for one rank)."""
        if self.ranks < 2:
            return []
        return [Verdict(r, 2 ** self.ratio[r].median(), self.wait[r].median(),
                        self.ratio[r].count,
                        {name: t[r].median() for name, t in self.excess.items()},
                        self.local_data) for r in range(self.ranks)]

    def verdicts(self) -> list[Verdict]:
        """The ranks the rule names slow (none for one rank or too few steps)."""
        return [v for v in self.scores() if v.slow]

    def steps(self) -> int:
        return self.ratio[0].count if self.ranks > 1 else 0

    def line(self, hosts: dict[int, str]) -> str:
        """The one line a job ends with."""
        if self.ranks < 2:
            return "chainermn-rt: slow node: none to compare (one rank)"
        if self.steps() < MIN_STEPS:
            return (f"chainermn-rt: slow node: too few steps to judge ({self.steps()} after "
                    f"the first {WARMUP}; at least {MIN_STEPS})")
        scores = self.scores()
        named = [_named(v, hosts) for v in scores if v.slow]
        others = [_waited(v, hosts) if v.waited else _noted(v, hosts)
                  for v in scores if not v.slow and (v.waited or v.slower)]
        if named:
            return (f"chainermn-rt: slow node: {'; '.join(named)} (median over "
                    f"{self.steps()} steps); {ADVICE}"
                    + (f"; not named: {'; '.join(others)}" if others else ""))
        if others:
            return (f"chainermn-rt: slow node: none (no rank both waited for and slower than "
                    f"its peers, over {self.steps()} steps); {'; '.join(others)}")
        return (f"chainermn-rt: slow node: none (every rank's compute within "
                f"{SLOW_RATIO:.2f}x its peers', none waited for over {WAIT_SHARE:.0%} of "
                f"a step, over {self.steps()} steps)")

    def hosts(self, hosts: dict[int, str]) -> list[str]:
        """The hosts of the named ranks, each once, in rank order."""
        return list(dict.fromkeys(hosts[v.rank] for v in self.verdicts() if v.rank in hosts))


def _who(v: Verdict, hosts: dict[int, str]) -> str:
    return f"rank {v.rank} on {hosts.get(v.rank, '?')}"


def _named(v: Verdict, hosts: dict[int, str]) -> str:
    data = (f", data wait {v.excess['data']:.0%} of a step over its peers' (data staged on "
            f"the node)" if v.slower_data else "")
    return (f"{_who(v, hosts)}: compute {v.ratio:.2f}x its peers' median{data}, the others "
            f"wait {max(v.wait, 0):.0%} of a step for it at the exchange")


def _waited(v: Verdict, hosts: dict[int, str]) -> str:
    phase = v.where()
    where = (f"{OWN_PHASES[phase]} ({v.excess[phase]:.0%} of a step over its peers')" if phase
             else "no phase of its own (its CPU shared, or the scheduler)")
    return (f"the others wait {v.wait:.0%} of a step for {_who(v, hosts)}, but its compute is "
            f"{v.ratio:.2f}x its peers' median: the extra time is in {where}, not a slow node")


def _noted(v: Verdict, hosts: dict[int, str]) -> str:
    return (f"{_who(v, hosts)}: compute {v.ratio:.2f}x its peers' median, but the others wait "
            f"{max(v.wait, 0):.0%} of a step for it (a slow node makes them wait "
            f"{WAIT_SHARE:.0%})")
