"""The straggler rule (chainermn_rt/timeline/straggler.py) on generated step times: a slow rank
is named, a rank the others wait for is named, a balanced job names none, and noise (bounded
jitter, occasional spikes) never trips it; rank 0's running view (live.py) judges as the whole
records do."""

from __future__ import annotations

import numpy
from hypothesis import given, settings
from hypothesis import strategies as st
from timeline_fakes import write_run

from chainermn_rt import host_list
from chainermn_rt.timeline import merge, straggler
from chainermn_rt.timeline.live import Live

STEPS = st.integers(straggler.MIN_STEPS + straggler.WARMUP, 80)


@st.composite
def noisy(draw, ranks_low=2, ranks_high=9):
    """Compute times (ranks x steps): a common per-step base, each rank's jitter within 5 %, and
    spikes (up to 10x) in at most a fifth of the judged steps per rank (so that the other
    ranks' median is raised in fewer than half of them)."""
    ranks = draw(st.integers(ranks_low, ranks_high))
    steps = draw(STEPS)
    rng = numpy.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    base = rng.uniform(1_000, 50_000, steps)
    jitter = draw(st.sampled_from([0.0, 0.01, 0.05]))
    compute = base * rng.uniform(1 - jitter, 1 + jitter, (ranks, steps))
    spiky = draw(st.integers(0, (steps - straggler.WARMUP) // 5))
    for r in range(ranks):
        at = rng.choice(steps, spiky, replace=False)
        compute[r, at] *= rng.uniform(1.5, 10.0, spiky)
    return compute


def judge_of(compute: numpy.ndarray) -> straggler.Judge:
    """Every rank starts each step together, waits 100 us for data, computes, waits at the
    exchange for the last one and 200 us more, then updates for 50 us."""
    own = 150.0 + compute
    step = numpy.broadcast_to(own.max(axis=0) + 200, compute.shape)
    judge = straggler.Judge(compute.shape[0])
    keep = numpy.arange(compute.shape[1]) >= straggler.WARMUP
    judge.add(compute[:, keep], own[:, keep], step[:, keep])
    return judge


@settings(max_examples=150, deadline=None)
@given(noisy())
def test_noise_never_names_a_rank(compute):
    judge = judge_of(compute)
    assert judge.verdicts() == []
    assert "slow node: none" in judge.line({}) or "too few steps" in judge.line({})


@settings(max_examples=100, deadline=None)
@given(noisy(), st.data())
def test_a_rank_slower_in_most_steps_is_named(compute, data):
    ranks, steps = compute.shape
    slow = data.draw(st.integers(0, ranks - 1))
    factor = data.draw(st.floats(1.3, 4.0))
    compute[slow] *= factor
    judge = judge_of(compute)
    hosts = {r: f"node{r}" for r in range(ranks)}
    assert [v.rank for v in judge.verdicts()] == [slow]
    assert judge.hosts(hosts) == [f"node{slow}"]
    assert f"rank {slow} on node{slow}: compute" in judge.line(hosts)


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 8), STEPS, st.floats(0.2, 0.6))
def test_a_rank_the_others_always_wait_for_is_named(ranks, steps, share):
    """Its compute is like everyone's, but its data wait is ``share`` of a step longer."""
    compute = numpy.full((ranks, steps), 10_000.0)
    step = 20_000.0
    own = numpy.full((ranks, steps), 11_000.0)
    own[ranks - 1] += share * step
    judge = straggler.Judge(ranks)
    judge.add(compute, own, numpy.full((ranks, steps), step))
    named = judge.verdicts()
    if steps >= straggler.MIN_STEPS:
        assert [v.rank for v in named] == [ranks - 1] and named[0].ratio < 1.01
    else:
        assert named == []


def test_a_slow_node_of_two_ranks_names_both_and_its_host_once():
    compute = numpy.full((4, 40), 8_000.0)
    compute[2:] *= 1.6
    judge = judge_of(compute)
    hosts = {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
    assert [v.rank for v in judge.verdicts()] == [2, 3]
    assert judge.hosts(hosts) == ["node2"]
    assert host_list.text(judge.hosts(hosts)) == "node2\n"


def test_one_rank_or_too_few_steps_names_none():
    assert straggler.Judge(1).line({}) == "chainermn-rt: slow node: none to compare (one rank)"
    compute = numpy.full((2, straggler.MIN_STEPS + straggler.WARMUP - 1), 5_000.0)
    compute[1] *= 3
    judge = judge_of(compute)
    assert judge.verdicts() == [] and "too few steps to judge (19 after" in judge.line({})


def test_median_of_others_is_the_median_of_the_others():
    rng = numpy.random.default_rng(1)
    for ranks in range(2, 9):
        values = rng.random((ranks, 5))
        got = straggler.median_of_others(values)
        for r in range(ranks):
            others = numpy.delete(values, r, axis=0)
            assert numpy.array_equal(got[r], numpy.median(others, axis=0))


def test_the_running_view_and_the_records_judge_alike(tmp_path):
    """Rank 0's windows (live.py) and `chainermn-rt report`'s tables feed the same tallies."""
    rng = numpy.random.default_rng(7)
    compute = rng.uniform(4_000, 6_000, (4, 60))
    compute[1] *= 1.4
    write_run(tmp_path, compute)
    tables = merge.tables(merge.load(tmp_path))
    offline = tables.judge()
    live = Live(4)
    for lo, hi in ((0, 10), (10, 37), (37, 60)):  # three windows
        live.add([numpy.column_stack([
            numpy.arange(lo, hi), *(tables.phases[p][r, lo:hi]
                                   for p in ("data", "compute", "exchange", "update")),
            tables.step[r, lo:hi], tables.samples[r, lo:hi]]) for r in range(4)], 1.0)
    for tallies in ("ratio", "wait"):
        assert [t.counts.tolist() for t in getattr(live.judge, tallies)] == \
            [t.counts.tolist() for t in getattr(offline, tallies)]
    assert [v.rank for v in offline.verdicts()] == [1]
    assert live.judge.line({1: "node1"}) == offline.line({1: "node1"})
