"""Metric sources (custom metrics API bodies, Prometheus API, text file) and the metric cache."""

from __future__ import annotations

import os
import pathlib

import httpx
import pytest

from tas_extender.decide.cache import MetricCache
from tas_extender.decide.metrics import Sample
from tas_extender.sources.custom_metrics import parse_metric_value_list
from tas_extender.sources.prometheus import PrometheusSource
from tas_extender.sources.textfile import TextfileSource, parse

NOW = 1_700_000_000.0


def _item(node: str, value: object, timestamp: str | None = "2023-11-14T22:13:10Z") -> dict:
    item = {"describedObject": {"kind": "Node", "name": node, "apiVersion": "/v1"},
            "metricName": "health_metric", "value": value}
    if timestamp:
        item["timestamp"] = timestamp
    return item


@pytest.mark.parametrize(
    ("quantity", "value"),
    [("1", 1.0), ("0", 0.0), ("-1", -1.0), ("500m", 0.5), ("2k", 2000.0), ("1Ki", 1024.0),
     ("3M", 3e6), ("1.5", 1.5), ("1e3", 1000.0), ("250u", 0.00025)],
)
def test_custom_metrics_quantities_are_parsed_as_kubernetes_writes_them(quantity, value):
    parsed = parse_metric_value_list({"kind": "MetricValueList", "items": [_item("node-1", quantity)]}, NOW)
    assert parsed["node-1"].value == pytest.approx(value)


def test_custom_metrics_timestamps_are_kept_and_unusable_items_skipped():
    parsed = parse_metric_value_list({"items": [
        _item("node-1", "1"), _item("node-2", "2", timestamp=None), _item("node-3", "lots"),
        _item("node-4", None), {"value": "1"}]}, NOW)
    assert parsed == {"node-1": Sample(1.0, 1699999990.0), "node-2": Sample(2.0, NOW)}


def test_custom_metrics_empty_list_gives_no_values():
    assert parse_metric_value_list({"kind": "MetricValueList", "items": None}, NOW) == {}


def _prometheus(handler) -> PrometheusSource:
    return PrometheusSource("http://prometheus:9090", transport=httpx.MockTransport(handler))


def test_prometheus_source_queries_each_metric_by_node_and_keeps_timestamps():
    queries = []

    def answer(request: httpx.Request) -> httpx.Response:
        queries.append(request.url.params["query"])
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"node": "node-1"}, "value": [NOW, "1"]},
            {"metric": {"node": "node-2"}, "value": [NOW - 5, "NaN"]},
            {"metric": {}, "value": [NOW, "3"]},
            {"metric": {"node": "node-4"}, "value": "broken"}]}})

    fetched = _prometheus(answer).fetch({"health_metric"})
    assert queries == ['max by (node) (node_health_metric{node!=""}) or max by (instance) (node_health_metric{node=""})']
    assert fetched == {"health_metric": {"node-1": Sample(1.0, NOW)}}


def test_prometheus_source_raises_when_prometheus_fails():
    with pytest.raises(httpx.HTTPStatusError):
        _prometheus(lambda request: httpx.Response(503)).fetch({"health_metric"})


def test_text_format_needs_a_node_label_and_a_finite_value():
    samples = parse('health_metric{node="a"} 1\nhealth_metric{node="b"} NaN\nhealth_metric 3\n'
                    'temp{node="a",zone="x"} 71.5 1699999000000\n', NOW)
    assert samples == {"health_metric": {"a": Sample(1.0, NOW)}, "temp": {"a": Sample(71.5, 1699999000.0)}}


def _write(path: pathlib.Path, text: str, mtime: int) -> None:
    path.write_text(text)
    os.utime(path, (mtime, mtime))  # a distinct mtime whatever the file system's resolution


def test_text_file_is_re_read_when_it_changes(tmp_path):
    path = tmp_path / "metrics.prom"
    _write(path, 'health_metric{node="a"} 0\n', 1000)
    source = TextfileSource(str(path))
    assert source.fetch({"health_metric"})["health_metric"]["a"].value == 0
    _write(path, 'health_metric{node="a"} 2\n', 2000)
    assert source.fetch({"health_metric"})["health_metric"]["a"].value == 2
    replacement = tmp_path / "next.prom"  # how node-exporter users write textfiles: rename
    _write(replacement, 'health_metric{node="a"} 1\n', 2000)
    replacement.replace(path)
    assert source.fetch({"health_metric"})["health_metric"]["a"].value == 1


def test_text_file_values_without_timestamp_are_fresh_and_explicit_timestamps_are_kept(tmp_path):
    path = tmp_path / "metrics.prom"
    path.write_text('health_metric{node="a"} 0\nhealth_metric{node="b"} 0 1000000\n')
    fetched = TextfileSource(str(path)).fetch({"health_metric", "unused"})
    assert fetched["health_metric"]["b"].timestamp == 1000.0
    assert fetched["health_metric"]["a"].timestamp > NOW
    assert fetched["unused"] == {}


class FlakySource:
    """A source whose next answer the test decides: values or an error."""

    name = "flaky"

    def __init__(self) -> None:
        self.answer: dict | Exception = {}
        self.asked: list[set[str]] = []

    def fetch(self, metrics: set[str]) -> dict[str, dict[str, Sample]]:
        self.asked.append(set(metrics))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_cache_fetches_only_the_metrics_asked_for_and_keeps_values_until_they_age_out():
    source = FlakySource()
    cache = MetricCache(source, max_age=60)
    source.answer = {"m": {"a": Sample(1.0, NOW)}}
    assert cache.refresh({"m"}, now=NOW).get("m", "a") == 1.0
    assert cache.synced and cache.source_up and source.asked == [{"m"}]

    source.answer = RuntimeError("connection refused")
    assert cache.refresh({"m"}, now=NOW + 30).get("m", "a") == 1.0  # still young enough
    assert not cache.source_up and "connection refused" in cache.last_error
    assert cache.refresh({"m"}, now=NOW + 61).get("m", "a") is None  # a failed source is no excuse


def test_a_node_an_answer_leaves_out_keeps_its_value_until_it_ages_out():
    """A Prometheus restarted by an upgrade answers with no series until its first scrape: the
    nodes' values must not all go missing at once (missing fails open, and pods went to the node
    their policy forbids). A node left out keeps its last value, which ages out as any other."""
    source = FlakySource()
    cache = MetricCache(source, max_age=60)
    source.answer = {"m": {"a": Sample(2.0, NOW), "b": Sample(0.0, NOW)}}
    cache.refresh({"m"}, now=NOW)
    source.answer = {"m": {}}  # answered, but without any node
    assert cache.refresh({"m"}, now=NOW + 20).values == {"m": {"a": 2.0, "b": 0.0}}
    source.answer = {"m": {"b": Sample(1.0, NOW + 40)}}  # b is back with a new value, a is not
    assert cache.refresh({"m"}, now=NOW + 40).values == {"m": {"a": 2.0, "b": 1.0}}
    assert cache.refresh({"m"}, now=NOW + 61).values == {"m": {"b": 1.0}}  # a's last value aged out


def test_cache_without_live_metrics_does_not_call_the_source():
    source = FlakySource()
    cache = MetricCache(source, max_age=60)
    cache.refresh(set(), now=NOW)
    assert source.asked == [] and cache.synced
