"""A running job's figures for the site's Prometheus: rank 0 writes them in the text exposition
format into node_exporter's textfile-collector folder (the profile's
``metrics_textfile_dir``), as ``chainermn_rt_job_<JOBID>.prom``, whole or not at all (a
temporary file in the same folder, renamed over it; the collector reads only ``*.prom``), after
each window (every ``metrics_every`` seconds or so), and removes it when training ends
normally. A crashed job's file stays: ``chainermn_rt_last_update_timestamp_seconds`` tells how
old it is.

>>> from chainermn_rt.timeline.live import Figures
>>> text = exposition("42", Figures(images_per_s=1200.5, step_p50_s=0.1, step_p95_s=0.2,
...                   step_sum_s=3.0, steps=30, shares={"exchange": 0.25}, slowest_rank=1),
...                   ranks=2, iteration=300, hosts={0: "node1", 1: "node2"}, slow=[],
...                   now=1767225600.0)
>>> print(text.splitlines()[2])
chainermn_rt_images_per_second{job_id="42"} 1200.5
"""

from __future__ import annotations

import os
from pathlib import Path

from chainermn_rt.files import write_atomically
from chainermn_rt.quoting import prometheus_label
from chainermn_rt.timeline.live import Figures


def file_name(job: str) -> str:
    """The job's file in the folder.

    >>> file_name("42")
    'chainermn_rt_job_42.prom'
    """
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in job)
    return f"chainermn_rt_job_{safe}.prom"


def exposition(job: str, figures: Figures, *, ranks: int, iteration: int,
               hosts: dict[int, str], slow: list[int], now: float) -> str:
    """The whole file's text."""
    job_label = f"job_id={prometheus_label(job)}"
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lines.append(f"{name}{{{job_label}{labels}}} {value!r}")

    metric("chainermn_rt_images_per_second", "gauge",
           "Training throughput of the job, all ranks, over the last window.",
           [("", float(figures.images_per_s))])
    metric("chainermn_rt_step_seconds", "summary",
           "Step time (update and extensions) over the last window, all ranks.",
           [(',quantile="0.5"', figures.step_p50_s), (',quantile="0.95"', figures.step_p95_s)])
    lines.append(f"chainermn_rt_step_seconds_sum{{{job_label}}} {figures.step_sum_s!r}")
    lines.append(f"chainermn_rt_step_seconds_count{{{job_label}}} {figures.steps}")
    metric("chainermn_rt_phase_share", "gauge",
           "Share of the step spent in each phase (data wait, compute, gradient exchange, "
           "update, extensions) over the last window, all ranks.",
           [(f",phase={prometheus_label(p)}", float(v)) for p, v in figures.shares.items()])
    if figures.slowest_rank is not None:
        host = hosts.get(figures.slowest_rank, "")
        metric("chainermn_rt_slowest_rank", "gauge",
               "The rank the others waited for in most steps of the last window.",
               [(f",host={prometheus_label(host)}", float(figures.slowest_rank))])
    metric("chainermn_rt_slow_rank", "gauge",
           "1 for each rank the straggler rule names so far (docs/timeline.md).",
           [(f",rank={prometheus_label(str(r))},host={prometheus_label(hosts.get(r, ''))}", 1.0)
            for r in slow])
    metric("chainermn_rt_ranks", "gauge", "Ranks of the job.", [("", float(ranks))])
    metric("chainermn_rt_iteration", "gauge", "The training iteration.",
           [("", float(iteration))])
    metric("chainermn_rt_last_update_timestamp_seconds", "gauge",
           "When rank 0 wrote this file (seconds since the epoch).", [("", float(now))])
    return "\n".join(lines) + "\n"


def write(folder: Path, job: str, text: str) -> Path:
    """``text`` as the job's file in ``folder``, whole or not at all."""
    path = Path(folder) / file_name(job)
    write_atomically(path, lambda f: f.write(text), mode=0o644)
    return path


def remove(folder: Path, job: str) -> None:
    try:
        os.unlink(Path(folder) / file_name(job))
    except FileNotFoundError:
        pass
