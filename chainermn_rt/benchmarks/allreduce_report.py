"""What ``bench allreduce`` shows and writes: the nccl-tests-like table, JSON, CSV and a plot.

Files hold the unrounded figures (``seconds``, ``algbw_gbps``, ``busbw_gbps`` as computed);
only the table rounds. Every file is written atomically (a temporary file, then a rename).

>>> from chainermn_rt.benchmarks.allreduce import Measurement
>>> m = Measurement(1024, 2e-6, 0.512, 0.512, 0, "mpi", 2)
>>> print(table_row(m))
        1024         256  float32    sum          mpi       2.00     0.51     0.51       0
>>> human_bytes(8), human_bytes(64 << 10), human_bytes(1 << 30)
('8B', '64K', '1G')
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from chainermn_rt import plotting
from chainermn_rt.benchmarks.allreduce import DTYPE, Measurement
from chainermn_rt.files import write_atomically

FIELDS = ("communicator", "nbytes", "count", "type", "redop", "ranks", "seconds",
          "algbw_gbps", "busbw_gbps", "wrong")
SUFFIXES = (".json", ".csv")  # --output
_ROW = "{:>12} {:>11} {:>8} {:>6} {:>12} {:>10} {:>8} {:>8} {:>7}"


def row(m: Measurement) -> dict:
    """One measurement as a record of FIELDS."""
    return {"communicator": m.communicator, "nbytes": m.nbytes, "count": m.count,
            "type": DTYPE, "redop": m.redop, "ranks": m.ranks, "seconds": m.seconds,
            "algbw_gbps": m.algbw_gbps, "busbw_gbps": m.busbw_gbps, "wrong": m.wrong}


def table_header(ranks: int, nodes: int, repeat: int, warmup: int) -> list[str]:
    return [f"# chainermn-rt bench allreduce: {ranks} ranks on {nodes} "
            f"node{'s' if nodes != 1 else ''}, {DTYPE}, in place; time: median of {repeat} "
            f"(after {warmup} warm-up) of the slowest rank",
            "#",
            _ROW.format("size", "count", "type", "redop", "communicator", "time", "algbw",
                        "busbw", "#wrong"),
            _ROW.format("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "")]


def table_row(m: Measurement) -> str:
    return _ROW.format(m.nbytes, m.count, DTYPE, m.redop, m.communicator,
                       f"{m.seconds * 1e6:.2f}", f"{m.algbw_gbps:.2f}", f"{m.busbw_gbps:.2f}",
                       m.wrong)


def table_footer(measurements: Sequence[Measurement]) -> list[str]:
    """Average busbw per communicator over the sizes (as nccl-tests), and the wrong total."""
    names = list(dict.fromkeys(m.communicator for m in measurements))
    averages = []
    for name in names:
        values = [m.busbw_gbps for m in measurements if m.communicator == name]
        averages.append(f"{name} {sum(values) / len(values):.3f}")
    wrong = sum(m.wrong for m in measurements)
    return [f"# average busbw (GB/s): {', '.join(averages)}",
            f"# wrong elements: {wrong} {'OK' if wrong == 0 else 'FAILED'}"]


def write(path: Path, measurements: Sequence[Measurement], context: dict) -> None:
    """``path`` by its suffix: ``.json`` (``context`` plus ``results``) or ``.csv`` (FIELDS)."""
    rows = [row(m) for m in measurements]
    if path.suffix == ".json":
        document = {"benchmark": "allreduce", **context, "results": rows}
        write_atomically(path, lambda f: f.write(json.dumps(document, indent=1) + "\n"))
    elif path.suffix == ".csv":
        def write_csv(f):
            writer = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
        write_atomically(path, write_csv)
    else:
        raise ValueError(f"{path}: suffix; allowed: {', '.join(SUFFIXES)}")


def human_bytes(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}B"


def plot(path: Path, measurements: Sequence[Measurement], title: str) -> None:
    """busbw against size (log2 axis), one line per communicator, as a PNG (Agg)."""
    fig, ax = plotting.axes(width=7)
    for name in dict.fromkeys(m.communicator for m in measurements):
        mine = [m for m in measurements if m.communicator == name]
        ax.plot([m.nbytes for m in mine], [m.busbw_gbps for m in mine], "o-", markersize=3,
                label=name)
    sizes = sorted({m.nbytes for m in measurements})
    ax.set_xscale("log", base=2)
    ticks = sizes[::max(1, len(sizes) // 12)]
    ax.set_xticks(ticks, [human_bytes(s) for s in ticks])
    plotting.save(fig, ax, path, title, "size (bytes)", "busbw (GB/s)")
