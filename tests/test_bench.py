"""The benchmark scripts run (2 real ranks, one round each) and print the JSON they document.

Their figures are not checked here (speed is measured by running them on a quiet
machine; see bench/RESULTS.md), only that they stay runnable and consistent.
"""

from __future__ import annotations

import pytest

from conftest import json_objects, run_mpi

pytestmark = pytest.mark.mpi


def _ratio_of(ratio: float, num_ms: float, den_ms: float) -> bool:
    """Whether ``ratio`` is ``round(a / b, 3)`` for times a, b that the script printed as
    ``num_ms``, ``den_ms``: it rounds times to 0.01 ms (so each is within 0.005 of the printed
    one) after computing the ratio from the unrounded times."""
    half_ms, half_ratio, eps = 0.005, 0.0005, 1e-9
    low = (num_ms - half_ms) / (den_ms + half_ms) - half_ratio - eps
    high = (num_ms + half_ms) / (den_ms - half_ms) + half_ratio + eps
    return low <= ratio <= high


def test_allreduce_reports_its_ratios():
    proc = run_mpi(2, ["-m", "bench.allreduce", "--repeat", "1"])
    [report] = [o for o in json_objects(proc.stdout) if "ours_ms" in o]
    assert report["arrays"] == 161 and report["values"] == 25_557_032
    assert _ratio_of(report["ratio_vs_best_raw"], report["best_raw_ms"], report["ours_ms"])
    assert _ratio_of(report["speedup_vs_naive"], report["naive_ms"], report["ours_ms"])
    assert report["ours_mpi_exchange_ms"] > 0


def test_weak_scaling_shares_one_baseline():
    proc = run_mpi(2, ["-m", "bench.weak_scaling", "--models", "mlp", "--rounds", "1"])
    [report] = [o for o in json_objects(proc.stdout) if "weak_scaling" in o]
    rows = report["weak_scaling"]
    assert [(r["batch"], r["communicator"]) for r in rows] == [
        (b, c) for b in (64, 256) for c in ("none", "naive", "chunked")]
    for batch in (64, 256):
        assert len({r["t1_ms"] for r in rows if r["batch"] == batch}) == 1


def test_exchange_floor_takes_the_exchange_apart():
    proc = run_mpi(2, ["-m", "bench.exchange_floor", "--repeat", "1"])
    [report] = [o for o in json_objects(proc.stdout) if "chunk_bytes" in o]
    assert report["chunk_bytes"] == 1 << 18
    assert len(report) == 9 and all(v > 0 for v in report.values())


def test_ratio_check_allows_the_rounding_and_nothing_more():
    # 43.94 / 30.004 rounds to 1.464, printed as 43.94 and 30.0, whose ratio rounds to 1.465
    assert _ratio_of(1.464, 43.94, 30.0) and _ratio_of(1.465, 43.94, 30.0)
    assert not _ratio_of(1.463, 43.94, 30.0) and not _ratio_of(1.466, 43.94, 30.0)
