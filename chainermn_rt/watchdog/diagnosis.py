"""From every rank's last report, which collective is stalled and who has not arrived.

A report says where a rank is: how many collectives it has entered (``seq``), the training
iteration, the collective it is in (``op``, None between collectives) and for how long.

>>> reports = {0: Report(seq=9, iteration=4, op="multi_node_mean_grad", seconds=70.0),
...            1: Report(seq=8, iteration=3, op=None, seconds=71.0)}
>>> line = diagnose(reports, {0: "node1", 1: "node2"}, {0: 1.0, 1: 2.0}, timeout=60,
...                 silent_timeout=30)
>>> for part in line.split("; "):
...     print(part)
stall: rank 0 waits in multi_node_mean_grad (iteration 4) for 70 s
not arrived: rank 1 on node2 (after iteration 3, outside collectives for 71 s)
"""

from __future__ import annotations

from typing import NamedTuple


class Report(NamedTuple):
    seq: int
    iteration: int
    op: str | None
    seconds: float  # in ``op``, or since it left its last collective


def ranks_text(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``ranks 0-2,5``; ``[3]`` -> ``rank 3``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    spans: list[list[int]] = []
    for r in ranks:
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return "ranks " + ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def diagnose(reports: dict[int, Report | None], hosts: dict[int, str],
             silent: dict[int, float], timeout: float, silent_timeout: float) -> str | None:
    """One line when a collective has waited ``timeout`` s or more for a rank, or when a rank
    has been silent for ``silent_timeout`` s while others wait in one; else None.
    ``silent[r]``: seconds since rank r's last report (a silent rank is dead, wedged, or its
    node lost)."""
    quiet = min(timeout, silent_timeout or timeout)
    lost = {r for r in reports if silent.get(r, 0) >= quiet}
    stuck = [r for r, rep in reports.items() if rep and rep.op and r not in lost
             and (rep.seconds >= timeout or lost)]
    if not stuck:
        return None
    seq = max(reports[r].seq for r in stuck)
    waiters = sorted(r for r, rep in reports.items()
                     if rep and rep.op and rep.seq == seq and r not in lost)
    first = reports[waiters[0] if waiters else stuck[0]]
    head = f"stall: {ranks_text(waiters) if waiters else 'no rank'} " \
           f"wait{'s' if len(waiters) == 1 else ''} in {first.op} (iteration {first.iteration}) " \
           f"for {first.seconds:.0f} s"
    missing = [r for r in sorted(reports) if r not in waiters]
    if not missing:
        return head + ": every rank is in it, so the collective itself does not complete " \
                      "(network or NCCL)"
    # reports come every quiet/6 s: once one rank is lost, one unheard for quiet/2 s is too
    # (ranks killed together, e.g. with their node, last reported out of phase)
    overdue = quiet / 2 if lost else quiet
    return head + "; not arrived: " + "; ".join(_where(r, reports[r], hosts, silent, overdue)
                                                  for r in missing)


def _where(rank: int, rep: Report | None, hosts: dict[int, str], silent: dict[int, float],
           quiet: float) -> str:
    who = f"rank {rank}" + (f" on {hosts[rank]}" if rank in hosts else "")
    if silent.get(rank, 0) >= quiet:
        last = "never reported" if rep is None else \
            f"last {'in ' + rep.op if rep.op else 'between collectives'}, iteration {rep.iteration}"
        return f"{who} (silent for {silent[rank]:.0f} s: dead, wedged or its node lost; {last})"
    if rep is None:
        return f"{who} (not reported yet)"
    if rep.op:
        return f"{who} (in {rep.op}, iteration {rep.iteration}, for {rep.seconds:.0f} s)"
    return f"{who} (after iteration {rep.iteration}, outside collectives for " \
           f"{rep.seconds:.0f} s)"
