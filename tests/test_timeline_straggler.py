"""The slow-node rule (chainermn_rt/timeline/straggler.py) on generated step times, its three
outcomes: a rank the others wait for that is slower than its peers is named (with the advice
and its host); one the others wait for while it computes at its peers' speed gets a diagnosis
(where its extra time is; no advice, no host); a slower one nobody waits for gets a note. A
balanced job names none, noise (bounded jitter, occasional spikes) never trips any outcome, and
rank 0's running view (live.py) judges as the whole records do."""

from __future__ import annotations

import re

import numpy
from hypothesis import given, settings
from hypothesis import strategies as st
from timeline_fakes import write_run

from chainermn_rt import host_list
from chainermn_rt.timeline import merge, straggler
from chainermn_rt.timeline.live import COLUMNS, Live

STEPS = st.integers(straggler.MIN_STEPS + straggler.WARMUP, 80)
ADVICE = "--exclude-from"


@st.composite
def noisy(draw, ranks_low=2, ranks_high=9, shared_spikes=False):
    """Compute times (ranks x steps): a common per-step base, each rank's jitter within 5 %, and
    spikes (up to 10x) in at most a fifth of the judged steps per rank (so that the other
    ranks' median is raised in fewer than half of them); ``shared_spikes``: in the same steps
    on every rank (at most a fifth of all steps spiked)."""
    ranks = draw(st.integers(ranks_low, ranks_high))
    steps = draw(STEPS)
    rng = numpy.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    base = rng.uniform(1_000, 50_000, steps)
    jitter = draw(st.sampled_from([0.0, 0.01, 0.05]))
    compute = base * rng.uniform(1 - jitter, 1 + jitter, (ranks, steps))
    spiky = draw(st.integers(0, (steps - straggler.WARMUP) // 5))
    shared = rng.choice(steps, spiky, replace=False)
    for r in range(ranks):
        at = shared if shared_spikes else rng.choice(steps, spiky, replace=False)
        compute[r, at] *= rng.uniform(1.5, 10.0, spiky)
    return compute


def judge_of(compute: numpy.ndarray, extra: dict[str, numpy.ndarray] | None = None,
             local_data: bool = False) -> straggler.Judge:
    """Every rank starts each step together, waits 100 us for data, computes, waits at the
    exchange for the last one and 200 us more, then updates for 50 us; ``extra``: more time
    in a phase (``data``, ``update``, ``ext``; ``other``: outside every phase), ranks x steps."""
    extra = extra or {}
    zero = numpy.zeros_like(compute)
    data = 100.0 + extra.get("data", zero)
    update = 50.0 + extra.get("update", zero)
    ext = extra.get("ext", zero)
    own = data + compute + update + ext + extra.get("other", zero)
    step = numpy.broadcast_to(own.max(axis=0) + 200, compute.shape)
    judge = straggler.Judge(compute.shape[0], local_data)
    keep = numpy.arange(compute.shape[1]) >= straggler.WARMUP
    judge.add(compute[:, keep], own[:, keep], step[:, keep], data=data[:, keep],
              update=update[:, keep], ext=ext[:, keep])
    return judge


def hosts_of(ranks: int) -> dict[int, str]:
    return {r: f"node{r}" for r in range(ranks)}


@settings(max_examples=150, deadline=None)
@given(noisy())
def test_noise_never_names_a_rank(compute):
    judge = judge_of(compute)
    assert judge.verdicts() == []
    assert not any(v.waited or v.slower for v in judge.scores())
    line = judge.line({})
    assert line.startswith("chainermn-rt: slow node: none (every rank's") or \
        "too few steps" in line


@settings(max_examples=100, deadline=None)
@given(noisy(shared_spikes=True), st.data())
def test_a_slower_rank_the_others_wait_for_is_named(compute, data):
    ranks, steps = compute.shape
    slow = data.draw(st.integers(0, ranks - 1))
    compute[slow] *= data.draw(st.floats(1.5, 4.0))
    judge = judge_of(compute)
    hosts = hosts_of(ranks)
    [named] = judge.verdicts()
    assert named.rank == slow and named.waited and named.ratio >= straggler.SLOW_RATIO
    assert judge.hosts(hosts) == [f"node{slow}"]
    line = judge.line(hosts)
    assert line.startswith(f"chainermn-rt: slow node: rank {slow} on node{slow}: compute ")
    assert line.endswith(straggler.ADVICE)


@settings(max_examples=100, deadline=None)
@given(noisy(shared_spikes=True), st.data())
def test_a_rank_waited_for_at_its_peers_speed_is_diagnosed_not_named(compute, data):
    """Its compute is like its peers', but it spends ``share`` of a step more in one phase
    (or outside every phase): the others wait for it, the line says where the time goes, and
    no host is written."""
    ranks, steps = compute.shape
    slow = data.draw(st.integers(0, ranks - 1))
    phase = data.draw(st.sampled_from(["data", "update", "ext", "other"]))
    share = data.draw(st.floats(0.3, 0.6))
    extra = numpy.zeros_like(compute)
    extra[slow] = share * compute.mean(axis=0) / (1 - share)  # about share of the step
    judge = judge_of(compute, {phase: extra})
    hosts = hosts_of(ranks)
    assert judge.verdicts() == [] and judge.hosts(hosts) == []
    assert host_list.text(judge.hosts(hosts)) == ""
    [waited] = [v for v in judge.scores() if v.waited]
    assert waited.rank == slow and not waited.slower
    line = judge.line(hosts)
    assert line.startswith("chainermn-rt: slow node: none (") and ADVICE not in line
    where = straggler.OWN_PHASES.get(phase, "no phase of its own (its CPU shared, or the "
                                            "scheduler)")
    assert f"for rank {slow} on node{slow}, but its compute is " in line
    assert f"the extra time is in {where}" in line, line


@settings(max_examples=100, deadline=None)
@given(noisy(shared_spikes=True), st.data())
def test_a_slower_rank_nobody_waits_for_is_a_note(compute, data):
    """Its compute is slower, but compute is a small part of the step (the rest, equal on
    every rank, is in the update): the others wait for it less than WAIT_SHARE."""
    ranks, steps = compute.shape
    slow = data.draw(st.integers(0, ranks - 1))
    factor = data.draw(st.floats(1.3, 4.0))
    small = compute * 0.02
    small[slow] *= factor
    judge = judge_of(small, {"update": numpy.broadcast_to(compute.mean(axis=0),
                                                          compute.shape)})
    hosts = hosts_of(ranks)
    assert judge.verdicts() == [] and judge.hosts(hosts) == []
    [noted] = [v for v in judge.scores() if v.slower]
    assert noted.rank == slow and not noted.waited
    line = judge.line(hosts)
    assert line.startswith("chainermn-rt: slow node: none (") and ADVICE not in line
    assert f"rank {slow} on node{slow}: compute " in line
    assert "of a step for it (a slow node makes them wait 15%)" in line


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 8), STEPS, st.floats(0.3, 0.6), st.booleans())
def test_a_data_wait_names_the_node_only_where_the_data_is_on_it(ranks, steps, share, staged):
    """Every rank computes alike; the last waits ``share`` of a step longer for its data:
    its node's doing where the job staged its data on the nodes, else the data's source's."""
    compute = numpy.full((ranks, steps), 10_000.0)
    extra = numpy.zeros_like(compute)
    extra[-1] = share * 10_350 / (1 - share)
    judge = judge_of(compute, {"data": extra}, local_data=staged)
    hosts = hosts_of(ranks)
    line = judge.line(hosts)
    if steps - straggler.WARMUP < straggler.MIN_STEPS:
        assert judge.verdicts() == [] and "too few steps" in line
    elif staged:
        assert [v.rank for v in judge.verdicts()] == [ranks - 1]
        assert judge.hosts(hosts) == [f"node{ranks - 1}"]
        assert "data staged on the node" in line and line.endswith(straggler.ADVICE)
    else:
        assert judge.verdicts() == [] and ADVICE not in line
        assert "the extra time is in its data wait" in line


def test_a_named_rank_and_a_diagnosed_one_share_the_line():
    """Rank 2 computes twice as slowly; rank 3 computes at its peers' speed but its extensions
    take a third of a step more: rank 2 is named, rank 3 diagnosed after the advice."""
    compute = numpy.full((4, 40), 6_000.0)
    compute[2] *= 2
    extra = numpy.zeros_like(compute)
    extra[3] = 6_000.0
    judge = judge_of(compute, {"ext": extra})
    hosts = {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
    assert [v.rank for v in judge.verdicts()] == [2] and judge.hosts(hosts) == ["node2"]
    line = judge.line(hosts)
    named, _, rest = line.partition(f"{straggler.ADVICE}; not named: ")
    assert named.startswith("chainermn-rt: slow node: rank 2 on node2: compute 2.00x")
    assert rest.startswith("the others wait ") and "for rank 3 on node2, but its compute is " \
        "1.00x its peers' median: the extra time is in its extensions" in rest, line


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


def tallies(judge: straggler.Judge) -> list[list[int]]:
    return [t.counts.tolist() for t in (*judge.ratio, *judge.wait,
                                        *(t for ts in judge.excess.values() for t in ts))]


def test_the_running_view_and_the_records_judge_alike(tmp_path):
    """Rank 0's windows (live.py) and `chainermn-rt report`'s tables feed the same tallies."""
    rng = numpy.random.default_rng(7)
    compute = rng.uniform(4_000, 6_000, (4, 60))
    compute[1] *= 1.4
    data = rng.uniform(50, 150, (4, 60))
    data[3] += 3_000  # waited for, its data staged: named too
    write_run(tmp_path, compute, data=data, ext=300, staged=True)
    tables = merge.tables(merge.load(tmp_path))
    assert tables.staged
    offline = tables.judge()
    live = Live(4, local_data=True)
    for lo, hi in ((0, 10), (10, 37), (37, 60)):  # three windows
        live.add([numpy.column_stack([
            numpy.arange(lo, hi), *(tables.phases[p][r, lo:hi]
                                   for p in ("data", "compute", "exchange", "update", "ext")),
            tables.step[r, lo:hi], tables.samples[r, lo:hi]]) for r in range(4)], 1.0)
    assert len(COLUMNS) == 8
    assert tallies(live.judge) == tallies(offline)
    assert [v.rank for v in offline.verdicts()] == [1, 3]
    hosts = {1: "node1", 3: "node2"}
    assert live.judge.line(hosts) == offline.line(hosts)
    assert re.search(r"rank 3 on node2: compute 0\.9\dx its peers' median, data wait 3\d% of a "
                     r"step over its peers' \(data staged on the node\)", offline.line(hosts))


def test_records_without_the_staged_field_read_as_not_staged(tmp_path):
    """Files written before the field: the data is not taken as the node's."""
    write_run(tmp_path, numpy.full((2, 30), 5_000.0), staged=True)
    for path in tmp_path.glob("rank-*.jsonl"):
        path.write_text(path.read_text().replace(',"staged":true', ""))
    assert not merge.tables(merge.load(tmp_path)).staged
