"""``chainermn-rt report``'s page: one self-contained HTML file (CSS inline, plots as base64 PNG
from matplotlib, no script, nothing fetched) showing where a job's time went.

Plots, each an ``<img>`` in a ``<figure class="plot" id="plot-NAME">``: ``throughput`` (images/s
over the run), ``step-time`` (each rank's median and 95th percentile step time),
``phases`` (each rank's step split into its phases, stacked), ``slowest`` (which rank the
others waited for, over time: a heat map of ranks x time), ``exchange`` (the exchange's share of
the step over time) and, given a one-node reference run, ``efficiency``.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass

import numpy

from chainermn_rt import plotting
from chainermn_rt.timeline.merge import Run, Tables, tables

PHASE_COLOURS = {"data": "#4c72b0", "compute": "#55a868", "exchange": "#c44e52",
                 "update": "#8172b2", "ext": "#ccb974", "other": "#bbbbbb"}


@dataclass(frozen=True)
class Summary:
    ranks: int
    nodes: int
    steps: int
    images_per_s: float

    @classmethod
    def of(cls, run: Run, t: Tables) -> Summary:
        every = max(p.info.every for ps in run.parts.values() for p in ps)
        seconds = float(t.step[0].sum()) if t.ranks else 0.0
        images = float(t.samples.sum()) * every
        return cls(t.ranks, len(set(run.hosts().values())), len(t.iteration),
                   images / seconds if seconds else 0.0)


def _groups(t: Tables, target: int = 60) -> list[numpy.ndarray]:
    """Consecutive steps of one part, about ``target`` groups in all (indices)."""
    n = len(t.iteration)
    size = max(1, n // target)
    out = []
    for part in numpy.unique(t.part):
        idx = numpy.flatnonzero(t.part == part)
        out.extend(idx[i:i + size] for i in range(0, len(idx), size))
    return [g for g in out if len(g)]


def _img(name: str, title: str, data: bytes, caption: str) -> str:
    encoded = base64.b64encode(data).decode()
    return (f'<figure class="plot" id="plot-{name}"><img alt="{html.escape(title)}" '
            f'src="data:image/png;base64,{encoded}"><figcaption>{html.escape(caption)}'
            f'</figcaption></figure>')


def _throughput(t: Tables, every: int) -> bytes:
    fig, ax = plotting.axes(7, 3.2)
    xs, ys = [], []
    for g in _groups(t):
        first = g[0]
        before = t.end_s[first] - t.step[0, first]
        seconds = t.end_s[g[-1]] - before
        if seconds > 0:
            xs.append(t.end_s[g[-1]])
            ys.append(t.samples[:, g].sum() * every / seconds)
    ax.plot(xs, ys, marker=".", color="#4c72b0", label="all ranks")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds since the first step")
    ax.set_ylabel("images/s")
    ax.set_title("Throughput over the run")
    ax.grid(True, alpha=0.3)
    return plotting.png(fig)


def _step_time(t: Tables, hosts: dict[int, str]) -> bytes:
    fig, ax = plotting.axes(7, 3.2)
    ranks = numpy.arange(t.ranks)
    ax.bar(ranks - 0.2, numpy.median(t.step, axis=1) * 1e3, 0.4, label="median",
           color="#4c72b0")
    ax.bar(ranks + 0.2, numpy.percentile(t.step, 95, axis=1) * 1e3, 0.4, label="95th percentile",
           color="#dd8452")
    _rank_axis(ax, t.ranks, hosts)
    ax.set_ylabel("step time (ms)")
    ax.set_title("Step time per rank")
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    return plotting.png(fig)


def _rank_axis(ax, ranks: int, hosts: dict[int, str]) -> None:
    if ranks <= 32:
        ax.set_xticks(range(ranks), [f"{r}\n{hosts.get(r, '')}" for r in range(ranks)],
                      fontsize=7)
    ax.set_xlabel("rank")


def shares(t: Tables) -> dict[str, numpy.ndarray]:
    """Per rank, each phase's share of the step time (``other``: the rest)."""
    total = t.step.sum(axis=1)
    total = numpy.where(total > 0, total, 1.0)
    out = {name: t.phases[name].sum(axis=1) / total for name in t.phases}
    out["other"] = numpy.clip(1.0 - sum(out.values()), 0.0, 1.0)
    return out


def _phases(t: Tables, hosts: dict[int, str]) -> bytes:
    fig, ax = plotting.axes(7, 3.4)
    bottom = numpy.zeros(t.ranks)
    for name, share in shares(t).items():
        ax.bar(numpy.arange(t.ranks), share * 100, 0.7, bottom=bottom, label=name,
               color=PHASE_COLOURS[name])
        bottom += share * 100
    _rank_axis(ax, t.ranks, hosts)
    ax.set_ylabel("% of step time")
    ax.set_ylim(0, 100)
    ax.set_title("Where each rank's step time goes", pad=24)
    ax.legend(ncol=6, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return plotting.png(fig)


def _slowest(t: Tables) -> bytes:
    fig, ax = plotting.axes(7, max(2.4, min(0.25 * t.ranks + 1.5, 8)))
    groups = _groups(t)
    who = t.slowest()
    grid = numpy.zeros((t.ranks, len(groups)))
    for j, g in enumerate(groups):
        if t.ranks > 1:
            grid[:, j] = numpy.bincount(who[g], minlength=t.ranks) / len(g)
    image = ax.imshow(grid * 100, aspect="auto", interpolation="nearest", cmap="viridis",
                      vmin=0, vmax=100, origin="lower",
                      extent=(0, t.end_s[-1] if len(t.end_s) else 1, -0.5, t.ranks - 0.5))
    fig.colorbar(image, ax=ax, label="% of steps slowest")
    ax.set_xlabel("seconds since the first step")
    ax.set_ylabel("rank")
    if t.ranks <= 32:
        ax.set_yticks(range(t.ranks))
    ax.set_title("The rank the others waited for, over time")
    return plotting.png(fig)


def _exchange(t: Tables) -> bytes:
    fig, ax = plotting.axes(7, 3.0)
    xs, ys = [], []
    for g in _groups(t):
        total = t.step[:, g].sum()
        if total > 0:
            xs.append(t.end_s[g[-1]])
            ys.append(100 * t.phases["exchange"][:, g].sum() / total)
    ax.plot(xs, ys, marker=".", color=PHASE_COLOURS["exchange"], label="exchange")
    ax.set_ylim(0, 100)
    ax.set_xlabel("seconds since the first step")
    ax.set_ylabel("% of step time")
    ax.set_title("The gradient exchange's share of the step")
    ax.grid(True, alpha=0.3)
    return plotting.png(fig)


def efficiency(this: Summary, reference: Summary) -> float:
    """Parallel efficiency against a reference run (one node), as ``chainermn-rt scaling``
    defines it: images/s over the reference's times the node ratio.

    >>> efficiency(Summary(8, 2, 100, 360.0), Summary(4, 1, 100, 200.0))
    0.9
    """
    return this.images_per_s / (reference.images_per_s * this.nodes / reference.nodes)


def _efficiency(this: Summary, reference: Summary) -> bytes:
    fig, ax = plotting.axes(7, 3.0)
    ideal = reference.images_per_s * this.nodes / reference.nodes
    ax.bar(["reference", "ideal", "this run"],
           [reference.images_per_s, ideal, this.images_per_s],
           color=["#999999", "#cccccc", "#4c72b0"])
    ax.set_ylabel("images/s")
    ax.set_title(f"Parallel efficiency {efficiency(this, reference):.1%} "
                 f"({this.nodes} nodes against {reference.nodes})")
    ax.grid(True, axis="y", alpha=0.3)
    return plotting.png(fig)


def page(run: Run, reference: Run | None = None) -> str:
    """The report's HTML."""
    t = tables(run)
    if len(t.iteration) == 0:
        from chainermn_rt.errors import UserError

        raise UserError(f"JOB_OR_FOLDER: {run.folder}: no step that every rank recorded; "
                        "allowed: records of a job that ran at least one step")
    hosts = run.hosts()
    every = max(p.info.every for ps in run.parts.values() for p in ps)
    summary = Summary.of(run, t)
    verdict = t.judge().line(hosts)
    figures = [
        _img("throughput", "images/s over the run", _throughput(t, every),
             "All ranks' images per second, in groups of consecutive steps (extensions such as "
             "evaluation included in the time)."),
        _img("step-time", "step time per rank", _step_time(t, hosts),
             "Each rank's median and 95th-percentile step time (update and extensions)."),
        _img("phases", "phases per rank", _phases(t, hosts),
             "data: waiting for the iterator; compute: forward and backward; exchange: the "
             "gradient allreduce (and the wait for the slowest rank); update: the optimizer; "
             "ext: extensions (evaluation, snapshots, logging)."),
        _img("slowest", "slowest rank per step", _slowest(t),
             "For each stretch of the run, the share of steps in which each rank had the most "
             "work outside the exchange (the others waited for it; by its own slowness only "
             "where the slow node row above names it)."),
        _img("exchange", "exchange share", _exchange(t),
             "The exchange's share of all ranks' step time, over the run."),
    ]
    rows = [("ranks", str(summary.ranks)), ("nodes", str(summary.nodes)),
            ("steps (every rank)", str(summary.steps)),
            ("parts (runs of the job)", str(max(len(ps) for ps in run.parts.values()))),
            ("images/s", f"{summary.images_per_s:,.1f}"),
            ("clock alignment", f"within {run.clock_bound_us():.0f} us of rank 0's clock"),
            ("slow node", verdict.removeprefix("chainermn-rt: slow node: "))]
    if reference is not None:
        ref_summary = Summary.of(reference, tables(reference))
        rows.append(("parallel efficiency",
                     f"{efficiency(summary, ref_summary):.1%} against {reference.folder} "
                     f"({ref_summary.images_per_s:,.1f} images/s on {ref_summary.nodes} "
                     f"node{'s' * (ref_summary.nodes != 1)})"))
        figures.append(_img("efficiency", "parallel efficiency",
                            _efficiency(summary, ref_summary),
                            "This run's images/s against the reference's times the node "
                            "ratio (ideal)."))
    if run.damaged:
        rows.append(("left out (damaged)", "; ".join(run.damaged)))
    share = shares(t)
    rank_rows = "".join(
        f"<tr><td>{r}</td><td>{html.escape(hosts.get(r, ''))}</td>"
        f"<td>{numpy.median(t.step[r]) * 1e3:.2f}</td>"
        f"<td>{numpy.percentile(t.step[r], 95) * 1e3:.2f}</td>"
        + "".join(f"<td>{share[name][r]:.1%}</td>" for name in share) + "</tr>"
        for r in range(t.ranks))
    summary_rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                           for k, v in rows)
    heads = "".join(f"<th>{html.escape(name)}</th>" for name in share)
    title = html.escape(f"chainermn-rt report: {run.folder}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em auto; max-width: 880px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; font-size: 0.9em; }}
figure.plot {{ margin: 1.5em 0; }}
figure.plot img {{ width: 840px; display: block; }}
figcaption {{ font-size: 0.85em; color: #555; }}
</style></head>
<body>
<h1>Where the job's time went</h1>
<p>{html.escape(str(run.folder))}</p>
<table id="summary">{summary_rows}</table>
{"".join(figures)}
<h2>Ranks</h2>
<table id="ranks"><tr><th>rank</th><th>host</th><th>median step (ms)</th>
<th>p95 step (ms)</th>{heads}</tr>
{rank_rows}</table>
</body></html>
"""
