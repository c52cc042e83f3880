"""What rank 0 knows while the job runs: every few seconds each rank hands it the durations of
the steps it recorded since (a *window*), and rank 0 keeps the straggler rule's tallies
(:class:`~chainermn_rt.timeline.straggler.Judge`) and the figures the site's metrics show.

A window is an array of rows ``(index, data, compute, exchange, update, ext, step,
samples)``, one per recorded step, durations in microseconds (``ext``: all extensions);
``index`` counts the part's recorded steps from 0 (the rule skips the first
:data:`~chainermn_rt.timeline.straggler.WARMUP`).

>>> import numpy
>>> rows = lambda c: numpy.array([[i, 0, c, 10, 1, 0, c + 11, 8] for i in range(30)], float)
>>> live = Live(2)
>>> live.add([rows(100.0), rows(100.0)], seconds=0.5)
>>> round(live.figures.images_per_s), live.figures.steps, live.judge.steps()
(960, 30, 25)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy

from chainermn_rt.timeline.straggler import WARMUP, Judge, slowest

COLUMNS = ("index", "data", "compute", "exchange", "update", "ext", "step", "samples")
INDEX, DATA, COMPUTE, EXCHANGE, UPDATE, EXT, STEP, SAMPLES = range(len(COLUMNS))


@dataclass
class Figures:
    """The last window's figures (the metrics)."""

    images_per_s: float = 0.0
    step_p50_s: float = 0.0
    step_p95_s: float = 0.0
    step_sum_s: float = 0.0
    steps: int = 0
    shares: dict[str, float] = field(default_factory=dict)  # phase -> share of the step
    slowest_rank: int | None = None


class Live:
    """Rank 0's running view of the job."""

    def __init__(self, ranks: int, every: int = 1, local_data: bool = False):
        self.ranks, self.every = ranks, every
        self.judge = Judge(ranks, local_data)
        self.figures = Figures()
        self.total_steps = 0

    def add(self, windows: list[numpy.ndarray], seconds: float) -> None:
        """Every rank's window (rank order), and the wall time the window took on rank 0."""
        k = min(len(w) for w in windows)
        if k == 0:
            return
        stack = numpy.stack([w[:k] for w in windows])  # ranks x steps x columns
        judged = stack[:, stack[0, :, INDEX] >= WARMUP, :]
        self.judge.add(judged[..., COMPUTE], judged[..., STEP] - judged[..., EXCHANGE],
                       judged[..., STEP], data=judged[..., DATA], update=judged[..., UPDATE],
                       ext=judged[..., EXT])
        steps = stack[..., STEP]
        total = steps.sum()
        shares = {name: float(stack[..., i].sum() / total) if total else 0.0
                  for name, i in (("data", DATA), ("compute", COMPUTE),
                                  ("exchange", EXCHANGE), ("update", UPDATE))}
        shares["extensions"] = max(0.0, 1.0 - sum(shares.values()))
        rank_of_step = slowest(steps - stack[..., EXCHANGE])
        self.total_steps += k
        self.figures = Figures(
            images_per_s=float(stack[..., SAMPLES].sum() * self.every / seconds)
            if seconds > 0 else 0.0,
            step_p50_s=float(numpy.percentile(steps, 50) / 1e6),
            step_p95_s=float(numpy.percentile(steps, 95) / 1e6),
            step_sum_s=float(steps[0].sum() / 1e6), steps=k, shares=shares,
            slowest_rank=int(numpy.bincount(rank_of_step, minlength=self.ranks).argmax())
            if self.ranks > 1 else None)
