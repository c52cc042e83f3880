"""Record files for the timeline's tests, written by the recorder's own line writers from step
durations a test chooses (microseconds), with each rank's clock offset and origin."""

from __future__ import annotations

from pathlib import Path

import numpy

from chainermn_rt.timeline import records

ORIGIN_NS = 1_767_225_600_000_000_000  # 2026-01-01, rank 0's clock at every part's start


def write_run(folder: Path, compute: numpy.ndarray, *, exchange: numpy.ndarray | None = None,
              data: float = 100, update: float = 50, samples: int = 32,
              skew_us: dict[int, float] | None = None, hosts: dict[int, str] | None = None,
              part: int = 1, restart: int = 0, ended: bool = True, first_iteration: int = 1,
              rtt_us: float = 0.0, later_s: float = 0.0) -> None:
    """One part per rank: steps of ``data``, ``compute[r, s]``, an exchange (default: the
    wait for the slowest rank's arrival plus 200 us) and ``update``, all ranks starting each
    step together on rank 0's clock. Rank r's clock reads ``skew_us[r]`` ahead: its stamps
    and origin carry the skew and its part line the offset that corrects it. ``later_s``: the
    part starts that much after ORIGIN_NS (a requeued run's)."""
    folder.mkdir(parents=True, exist_ok=True)
    ranks, steps = compute.shape
    skew_us = skew_us or {}
    hosts = hosts or {r: f"node{r // 2 + 1}" for r in range(ranks)}
    arrive = data + compute
    if exchange is None:
        exchange = arrive.max(axis=0) - arrive + 200
    for r in range(ranks):
        skew = skew_us.get(r, 0.0)
        origin = ORIGIN_NS + int(later_s * 1e9) + int(skew * 1000)
        lines = [records.part_line(records.PartInfo(
            part, r, ranks, hosts[r], 1000 + r, "42", restart, origin, -skew, rtt_us, 1,
            False))]
        t = 10.0  # rank 0's clock, us since the origin
        for s in range(steps):
            b = int(t)
            d = b + int(data)
            c = d + int(compute[r, s])
            x = c + int(exchange[r, s])
            u = x + int(update)
            lines.append(records.step_line(first_iteration + s, samples, b, u + 5,
                                           [("data", b, d), ("compute", d, c),
                                            ("exchange", c, x), ("update", x, u)]))
            t = max(data + compute[:, s] + exchange[:, s]) + update + 20 + t
        if ended:
            lines.append(records.end_line(int(t) + 10, steps, -skew, rtt_us))
        with open(folder / records.file_name(r), "a") as f:
            f.write("".join(lines))
