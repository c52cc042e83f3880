"""The slow node: a rank whose compute is consistently slower than its peers', or for which the
others always wait at the exchange.

The rule, for each rank, over every step recorded after the first :data:`WARMUP` of each part
(the first update is a broadcast, the first steps tune and warm caches):

- its ``compute`` (forward and backward) divided by the median of the other ranks' in the same
  step; the median of that ratio over the steps at least :data:`SLOW_RATIO` (1.15), or
- its work outside the exchange (the step less the exchange: data wait, compute, update,
  extensions) less the median of the other ranks', as a share of the step (the median rank's
  step time): how long the others wait for it at the exchange; the median over the steps at
  least :data:`WAIT_SHARE` (0.15),

and at least :data:`MIN_STEPS` steps. Medians, not means: a rank slowed in a few steps (a
garbage collection, rank 0's logging) is not named; a rank slowed in most steps is. Jitter of
up to 5 % on every phase of every rank moves the ratio to at most 1.105 and the wait to at most
0.106 of a step, below both thresholds. Each rank's own work, not its exchange's duration nor
when it arrived: an exchange also holds local work (packing and scaling the gradients), and on
a loaded core a rank may leave it well after its peers, then arrive late at the next one
through no fault of its own work. The medians come from fixed histograms
(:class:`Tally`: 0.35 % bins for the ratio, 0.25 % of a step for the wait), so that a running
job (rank 0, window by window) and ``chainermn-rt report`` (all the records) judge alike with
bounded memory.

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
from dataclasses import dataclass

import numpy

SLOW_RATIO = 1.15
WAIT_SHARE = 0.15
MIN_STEPS = 20
WARMUP = 5
SLOW_NODES_FILE = "slow-nodes.txt"


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
    rank: int
    ratio: float  # its compute over its peers' median (median over the steps)
    wait: float  # how long the others wait for it, share of a step (median over the steps)
    steps: int

    @property
    def slow(self) -> bool:
        return self.steps >= MIN_STEPS and (self.ratio >= SLOW_RATIO or self.wait >= WAIT_SHARE)


class Judge:
    """Per-rank tallies of the rule's two scores, fed step by step (or window by window)."""

    def __init__(self, ranks: int):
        self.ranks = ranks
        self.ratio = [Tally(-4.0, 4.0, 0.005) for _ in range(ranks)]  # log2 of the ratio
        self.wait = [Tally(-1.0, 1.0, 0.0025) for _ in range(ranks)]

    def add(self, compute: numpy.ndarray, own: numpy.ndarray, step: numpy.ndarray) -> None:
        """Durations of some steps, ranks x steps: the compute, the work outside the exchange
        (the step less the exchange) and the step; any unit, one for all three."""
        if self.ranks < 2 or compute.shape[1] == 0:
            return
        with numpy.errstate(divide="ignore", invalid="ignore"):
            ratio = numpy.log2(compute / median_of_others(compute))
            wait = (own - median_of_others(own)) / numpy.median(step, axis=0)
        for r in range(self.ranks):
            self.ratio[r].add(ratio[r])
            self.wait[r].add(wait[r])

    def verdicts(self) -> list[Verdict]:
        """The ranks the rule names (none for one rank or too few steps)."""
        found = [Verdict(r, 2 ** self.ratio[r].median(), self.wait[r].median(),
                         self.ratio[r].count) for r in range(self.ranks)]
        return [v for v in found if v.slow]

    def steps(self) -> int:
        return self.ratio[0].count if self.ranks > 1 else 0

    def line(self, hosts: dict[int, str]) -> str:
        """The one line a job ends with."""
        named = self.verdicts()
        if self.ranks < 2:
            return "chainermn-rt: slow node: none to compare (one rank)"
        if self.steps() < MIN_STEPS:
            return (f"chainermn-rt: slow node: too few steps to judge ({self.steps()} after "
                    f"the first {WARMUP}; at least {MIN_STEPS})")
        if not named:
            return (f"chainermn-rt: slow node: none (every rank's compute within "
                    f"{SLOW_RATIO:.2f}x its peers', none waited for over {WAIT_SHARE:.0%} of "
                    f"a step, over {self.steps()} steps)")
        parts = [f"rank {v.rank} on {hosts.get(v.rank, '?')}: compute {v.ratio:.2f}x its "
                 f"peers' median, the others wait {max(v.wait, 0):.0%} of a step for it at the "
                 f"exchange" for v in named]
        return (f"chainermn-rt: slow node: {'; '.join(parts)} (median over {named[0].steps} "
                f"steps); exclude it with --exclude-from FILE (the timeline's "
                f"{SLOW_NODES_FILE})")

    def hosts(self, hosts: dict[int, str]) -> list[str]:
        """The hosts of the named ranks, each once, in rank order."""
        return list(dict.fromkeys(hosts[v.rank] for v in self.verdicts() if v.rank in hosts))

