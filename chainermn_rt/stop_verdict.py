"""What the batch shell does once a step with stop handling has ended, decided here for every
case; slurm/templates/job.sh.j2 only formats the table (docs/reliability.md).

The shell finds four facts, each 1 or 0, in this order (its ``key``):

- ``snapshot``: the ranks wrote a snapshot (the stop file's ``.done`` names it);
- ``asked``: the shell asked for one (its trap created the stop file on the site's signal);
- ``resumable``: the program uses chainermn_rt.resumable (rank 0's ``.resumable`` file);
- ``left``: the job has been requeued fewer than ``max_requeues`` times;
- ``preempted``, only where Slurm requeues a preempted job itself once it ends (24.05 on:
  slurm_rules.CHANGES' ``preempted_end_requeues``): ``scontrol show job`` gives the job a
  PreemptTime. Then the shell must not requeue it too: Slurm would run it once more.

A message names the shell's values as ``{snapshot}`` (the snapshot's path), ``{job}`` (the job
or array task id), ``{restarts}`` (SLURM_RESTART_COUNT) and ``{next}`` (restarts + 1, set only
while restarts are left).

>>> print(*table(45, True, 3), sep="\\n")  # doctest: +NORMALIZE_WHITESPACE
Rule(pattern='1??1', verdict=Verdict(message='snapshot {snapshot} written; requeueing job {job}
    (restart {next} of at most 3)', requeue=True, exit=0))
Rule(pattern='1??0', verdict=Verdict(message='snapshot {snapshot} written; not requeueing
    (3 restart(s) allowed, {restarts} done)', requeue=False, exit=0))
Rule(pattern='0111', verdict=Verdict(message='no snapshot within 45 s; the next run resumes
    from the one before; requeueing job {job} (restart {next} of at most 3)', requeue=True,
    exit=0))
Rule(pattern='0110', verdict=Verdict(message='no snapshot within 45 s; the next run resumes
    from the one before; not requeueing (3 restart(s) allowed, {restarts} done)',
    requeue=False, exit=None))
Rule(pattern='010?', verdict=Verdict(message='the ranks wrote no snapshot (the program does not
    use chainermn_rt.resumable?); not requeueing', requeue=False, exit=None))
Rule(pattern='00??', verdict=Verdict(message=None, requeue=False, exit=None))
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

FACTS = ("snapshot", "asked", "resumable", "left")
PREEMPTED = "preempted"  # the fifth fact, where Slurm requeues a preempted job itself


def facts(slurm_requeues_preempted: bool = False) -> tuple[str, ...]:
    """The key's facts, in the order the shell finds them."""
    return FACTS + ((PREEMPTED,) if slurm_requeues_preempted else ())


@dataclass(frozen=True)
class Verdict:
    message: str | None  # one line on stderr after "chainermn-rt: "; None: nothing to say
    requeue: bool  # remove staged data, `scontrol requeue` the job (or its array task)
    exit: int | None  # the batch shell's exit status; None: the step's


@dataclass(frozen=True)
class Rule:
    pattern: str  # a shell `case` pattern over the key: per fact 1, 0 or ? (either)
    verdict: Verdict


def decide(snapshot: bool, asked: bool, resumable: bool, left: bool, preempted: bool = False,
           *, wait_s: int, requeue: bool, max_requeues: int) -> Verdict:
    """The verdict for one case. A resumable program that wrote no snapshot in time (a slow
    iteration, a short grace time) is requeued too: its next run resumes from the one before.
    ``preempted`` (a fact only where Slurm requeues a preempted job itself): the shell ends
    the job and leaves the requeue to Slurm, whatever restarts are left."""
    if snapshot:
        said, status = "snapshot {snapshot} written", 0
    elif asked and resumable:
        said, status = (f"no snapshot within {wait_s} s; the next run resumes from the one "
                        "before"), None
    elif asked:
        return Verdict("the ranks wrote no snapshot (the program does not use "
                       "chainermn_rt.resumable?); not requeueing", False, None)
    else:
        return Verdict(None, False, None)
    if requeue and preempted and asked:  # the signal was the preemption's
        return Verdict(f"{said}; job {{job}} was preempted: Slurm requeues it "
                       "(PreemptMode=REQUEUE)", False, 0)
    if requeue and left:
        return Verdict(f"{said}; requeueing job {{job}} (restart {{next}} of at most "
                       f"{max_requeues})", True, 0)
    why = (f"{max_requeues} restart(s) allowed, {{restarts}} done" if requeue
           else "the profile has requeue = false")
    return Verdict(f"{said}; not requeueing ({why})", False, status)


def table(wait_s: int, requeue: bool, max_requeues: int,
          slurm_requeues_preempted: bool = False) -> tuple[Rule, ...]:
    """Every key's verdict, the keys of one verdict merged into as few patterns as a pairwise
    merge finds; the patterns never overlap, so their order does not matter."""
    rules: dict[Verdict, list[str]] = {}
    for bits in itertools.product((1, 0), repeat=len(facts(slurm_requeues_preempted))):
        verdict = decide(*map(bool, bits), wait_s=wait_s, requeue=requeue,
                         max_requeues=max_requeues)
        rules.setdefault(verdict, []).append("".join(map(str, bits)))
    return tuple(Rule(pattern, verdict) for verdict, keys in rules.items()
                 for pattern in _merged(keys))


def _merged(keys: list[str]) -> list[str]:
    """Two patterns that differ in one fact only, 1 against 0, become one with ? there.

    >>> _merged(["111", "110", "101", "011"])
    ['11?', '101', '011']
    """
    patterns = list(keys)
    while True:
        for a, b in itertools.combinations(patterns, 2):
            differ = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
            if len(differ) == 1 and "?" not in (a[differ[0]], b[differ[0]]):
                i = differ[0]
                patterns[patterns.index(a)] = a[:i] + "?" + a[i + 1:]
                patterns.remove(b)
                break
        else:
            return patterns
