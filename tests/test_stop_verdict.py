"""The batch shell's verdict once its step has ended, as Python decides it for every case
(chainermn_rt/stop_verdict.py). tests/test_job_stop.py runs each case in the rendered script."""

from __future__ import annotations

import itertools
from fnmatch import fnmatchcase

import pytest

from chainermn_rt.stop_verdict import FACTS, Rule, Verdict, decide, facts, table

WRITTEN = "snapshot {snapshot} written; "
LATE = "no snapshot within 45 s; the next run resumes from the one before; "
AGAIN = "requeueing job {job} (restart {next} of at most 3)"
SPENT = "not requeueing (3 restart(s) allowed, {restarts} done)"
OFF = "not requeueing (the profile has requeue = false)"
NOT_RESUMABLE = ("the ranks wrote no snapshot (the program does not use "
                 "chainermn_rt.resumable?); not requeueing")
PREEMPTED = "job {job} was preempted: Slurm requeues it (PreemptMode=REQUEUE)"

# (wait_s, requeue, max_requeues) -> every rule; keys: snapshot, asked, resumable, left
TABLES = {
    (45, True, 3): [
        Rule("1??1", Verdict(WRITTEN + AGAIN, True, 0)),
        Rule("1??0", Verdict(WRITTEN + SPENT, False, 0)),
        Rule("0111", Verdict(LATE + AGAIN, True, 0)),
        Rule("0110", Verdict(LATE + SPENT, False, None)),
        Rule("010?", Verdict(NOT_RESUMABLE, False, None)),
        Rule("00??", Verdict(None, False, None))],
    (45, False, 0): [
        Rule("1???", Verdict(WRITTEN + OFF, False, 0)),
        Rule("011?", Verdict(LATE + OFF, False, None)),
        Rule("010?", Verdict(NOT_RESUMABLE, False, None)),
        Rule("00??", Verdict(None, False, None))],
    # Slurm 24.05 on: a fifth fact, preempted; Slurm requeues such a job itself
    # (preempted counts where the shell asked for the snapshot: the signal was preemption's)
    (45, True, 3, True): [
        Rule("11??1", Verdict(WRITTEN + PREEMPTED, False, 0)),
        Rule("11?10", Verdict(WRITTEN + AGAIN, True, 0)),
        Rule("10?1?", Verdict(WRITTEN + AGAIN, True, 0)),
        Rule("11?00", Verdict(WRITTEN + SPENT, False, 0)),
        Rule("10?0?", Verdict(WRITTEN + SPENT, False, 0)),
        Rule("011?1", Verdict(LATE + PREEMPTED, False, 0)),
        Rule("01110", Verdict(LATE + AGAIN, True, 0)),
        Rule("01100", Verdict(LATE + SPENT, False, None)),
        Rule("010??", Verdict(NOT_RESUMABLE, False, None)),
        Rule("00???", Verdict(None, False, None))],
}


def keys(stop) -> list[str]:
    return ["".join(bits) for bits in itertools.product("10", repeat=len(facts(*stop[3:])))]


@pytest.mark.parametrize("stop", sorted(TABLES))
def test_every_case_has_its_verdict(stop):
    assert list(table(*stop)) == TABLES[stop]


def test_facts_are_in_the_order_the_template_finds_them():
    assert FACTS == ("snapshot", "asked", "resumable", "left")
    assert facts(True) == (*FACTS, "preempted") and facts(False) == FACTS


@pytest.mark.parametrize("stop", [(45, True, 3), (45, False, 0), (5, True, 0), (105, True, 1000),
                                  (45, True, 3, True), (45, False, 0, True), (5, True, 0, True)])
def test_each_key_matches_one_pattern_whose_verdict_is_the_keys(stop):
    wait_s, requeue, max_requeues = stop[:3]
    for key in keys(stop):
        matched = [rule.verdict for rule in table(*stop) if fnmatchcase(key, rule.pattern)]
        assert matched == [decide(*(bit == "1" for bit in key), wait_s=wait_s,
                                  requeue=requeue, max_requeues=max_requeues)], key


def test_no_restart_allowed_stops_with_the_snapshot():
    """requeue = true with max_requeues = 0: the shell's ``left`` is never 1."""
    assert decide(True, True, True, False, wait_s=5, requeue=True, max_requeues=0) == Verdict(
        WRITTEN + "not requeueing (0 restart(s) allowed, {restarts} done)", False, 0)


def test_only_a_requeue_names_the_next_restart():
    """``{next}`` is set in the shell only while restarts are left."""
    for stop in TABLES:
        for rule in table(*stop):
            uses_next = "{next}" in (rule.verdict.message or "")
            assert uses_next == rule.verdict.requeue and (not uses_next or rule.pattern[3] == "1")
