"""The timeline's Prometheus metrics (chainermn_rt/timeline/metrics.py) read back by
prometheus-client's own parser; label values quoted by quoting.prometheus_label."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from chainermn_rt import quoting
from chainermn_rt.errors import UserError
from chainermn_rt.timeline import metrics
from chainermn_rt.timeline.live import Figures

FIGURES = Figures(images_per_s=1234.5, step_p50_s=0.125, step_p95_s=0.25, step_sum_s=3.75,
                  steps=30, shares={"data": 0.05, "compute": 0.6, "exchange": 0.25,
                                    "update": 0.07, "extensions": 0.03}, slowest_rank=3)


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_exposition_parses_with_prometheus_clients_parser():
    text = metrics.exposition("1234", FIGURES, ranks=4, iteration=900,
                              hosts={2: "node2", 3: "node2"}, slow=[3], now=1767225600.0)
    got = samples(text)
    job = ("job_id", "1234")
    assert got[("chainermn_rt_images_per_second", (job,))] == 1234.5
    assert got[("chainermn_rt_step_seconds", (job, ("quantile", "0.5")))] == 0.125
    assert got[("chainermn_rt_step_seconds", (job, ("quantile", "0.95")))] == 0.25
    assert got[("chainermn_rt_step_seconds_count", (job,))] == 30
    assert got[("chainermn_rt_phase_share", (job, ("phase", "exchange")))] == 0.25
    assert got[("chainermn_rt_phase_share", (job, ("phase", "data")))] == 0.05
    assert got[("chainermn_rt_slowest_rank", (("host", "node2"), job))] == 3
    assert got[("chainermn_rt_slow_rank", (("host", "node2"), job, ("rank", "3")))] == 1
    assert got[("chainermn_rt_ranks", (job,))] == 4
    assert got[("chainermn_rt_last_update_timestamp_seconds", (job,))] == 1767225600.0
    kinds = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert kinds["chainermn_rt_step_seconds"] == "summary"
    assert kinds["chainermn_rt_images_per_second"] == "gauge"


@given(st.text(st.characters(exclude_categories=("Cs",)), max_size=40))
def test_any_label_value_reads_back(value):
    text = metrics.exposition(value, FIGURES, ranks=1, iteration=1, hosts={3: value}, slow=[],
                              now=0.0)
    got = samples(text)
    assert got[("chainermn_rt_ranks", (("job_id", value),))] == 1
    assert got[("chainermn_rt_slowest_rank", (("host", value), ("job_id", value)))] == 3


def test_a_label_value_that_is_not_utf8_is_refused():
    with pytest.raises(UserError, match="job id: .* is not UTF-8"):
        quoting.prometheus_label("caf\udce9", "job id")


def test_the_file_is_written_whole_and_removed_at_the_end(tmp_path):
    text = metrics.exposition("77", FIGURES, ranks=2, iteration=5, hosts={}, slow=[], now=1.0)
    path = metrics.write(tmp_path, "77", text)
    assert path.name == "chainermn_rt_job_77.prom" and path.read_text() == text
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    again = text.replace("1234.5", "99.0")
    metrics.write(tmp_path, "77", again)
    assert os.listdir(tmp_path) == [path.name] and path.read_text() == again
    metrics.remove(tmp_path, "77")
    metrics.remove(tmp_path, "77")  # gone already: nothing to do
    assert os.listdir(tmp_path) == []
    assert metrics.file_name("12_3/..") == "chainermn_rt_job_12_3___.prom"
