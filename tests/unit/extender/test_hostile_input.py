"""Hostile input that is not a scheduler request: policies and metric values.

A policy that cannot be used is refused with the field at fault and the reason, and the others
keep deciding. A metric value that cannot be trusted is dropped with a log line naming why, and
the decisions come out exactly as if that value had never been sent: never a wrong decision.
"""

from __future__ import annotations

import datetime
import logging
import time

import httpx
import orjson
import pytest
import yaml

from tas_extender.decide.cache import MetricCache
from tas_extender.cli import load_policy_files
from tas_extender.decide.engine import Engine
from tas_extender.offline.evaluate import evaluate
from tas_extender.decide.metrics import Sample
from tas_extender.decide.policy import PolicyError, parse_policy
from tas_extender.sources.custom_metrics import CustomMetricsSource
from tas_extender.sources.prometheus import PrometheusSource
from tas_extender.sources.textfile import TextfileSource
from tas_extender.decide.store import PolicyStore
from tas_extender.decide.strategies import labeling

RULE = {"metricname": "health_metric", "operator": "Equals", "target": 1}


def _policy(strategies: object, name: str = "p", **metadata) -> dict:
    return {"apiVersion": "telemetry.intel.com/v1alpha1", "kind": "TASPolicy",
            "metadata": {"name": name, "namespace": "ns", **metadata}, "spec": {"strategies": strategies}}


def _nested(depth: int) -> dict:
    junk: dict = {"leaf": 1}
    for _ in range(depth):
        junk = {"deeper": [junk]}
    return junk


# --- policies -------------------------------------------------------------------------------

HOSTILE_POLICIES = [
    ("more rules than the limit of 100", {"dontschedule": {"rules": [RULE] * 101}},
     "spec.strategies.dontschedule.rules", "at most 100 items"),
    ("ten thousand rules", {"scheduleonmetric": {"rules": [RULE] * 10_000}},
     "spec.strategies.scheduleonmetric.rules", "at most 100 items"),
    ("more labels than the limit of 50", {"labeling": {"rules": [{**RULE, "labels": [f"k{i}=v" for i in range(51)]}]}},
     "spec.strategies.labeling.rules[0].labels", "at most 50 items"),
    ("metric name with a slash", {"dontschedule": {"rules": [{**RULE, "metricname": "nodes/x"}]}},
     "spec.strategies.dontschedule.rules[0].metricname", "pattern"),
    ("metric name with a PromQL injection", {"dontschedule": {"rules": [{**RULE, "metricname": 'x{node=~".*"}) or vector(1'}]}},
     "spec.strategies.dontschedule.rules[0].metricname", "pattern"),
    ("metric name with a newline", {"dontschedule": {"rules": [{**RULE, "metricname": "health\nmetric"}]}},
     "spec.strategies.dontschedule.rules[0].metricname", "pattern"),
    ("metric name of a megabyte", {"dontschedule": {"rules": [{**RULE, "metricname": "m" * 1_000_000}]}},
     "spec.strategies.dontschedule.rules[0].metricname", "at most 200 characters"),
    ("metric name that is a number", {"dontschedule": {"rules": [{**RULE, "metricname": 42}]}},
     "spec.strategies.dontschedule.rules[0].metricname", "valid string"),
    ("label that is a number", {"labeling": {"rules": [{**RULE, "labels": [7]}]}},
     "spec.strategies.labeling.rules[0].labels[0]", "valid string"),
    ("labels as one string", {"labeling": {"rules": [{**RULE, "labels": "a=b"}]}},
     "spec.strategies.labeling.rules[0].labels", "valid list"),
    ("unknown strategy that is not a strategy", {"scheduleanyway": "always"},
     "spec.strategies.scheduleanyway", "valid dictionary"),
    ("unknown operator", {"dontschedule": {"rules": [{**RULE, "operator": "NotEquals"}]}},
     "spec.strategies.dontschedule.rules[0].operator", "LessThan"),
    ("unknown logical operator", {"dontschedule": {"rules": [RULE], "logicalOperator": 1}},
     "spec.strategies.dontschedule.logicalOperator", "anyOf"),
    ("fractional target", {"dontschedule": {"rules": [{**RULE, "target": 0.5}]}},
     "spec.strategies.dontschedule.rules[0].target", "fractional part"),
    ("NaN target", {"dontschedule": {"rules": [{**RULE, "target": float("nan")}]}},
     "spec.strategies.dontschedule.rules[0].target", "finite number"),
    ("infinite target", {"dontschedule": {"rules": [{**RULE, "target": float("inf")}]}},
     "spec.strategies.dontschedule.rules[0].target", "finite number"),
    ("target that is a word", {"dontschedule": {"rules": [{**RULE, "target": "high"}]}},
     "spec.strategies.dontschedule.rules[0].target", "integer"),
    ("target beyond int64", {"dontschedule": {"rules": [{**RULE, "target": 2**63}]}},
     "spec.strategies.dontschedule.rules[0].target", "less than or equal to 9223372036854775807"),
    ("rules as a map", {"dontschedule": {"rules": {"first": RULE}}},
     "spec.strategies.dontschedule.rules", "valid list"),
    ("strategy as a list", {"dontschedule": [RULE]},
     "spec.strategies.dontschedule", "valid dictionary"),
    ("strategies as a string", "dontschedule",
     "spec.strategies", "valid dictionary"),
    ("null rule", {"dontschedule": {"rules": [None]}},
     "spec.strategies.dontschedule.rules[0]", "valid dictionary"),
    ("deeply nested junk in a rule", {"dontschedule": {"rules": [{**RULE, "junk": _nested(500)}]}},
     "spec.strategies.dontschedule.rules[0].junk", "Extra inputs"),
    ("strategies as null", None, "spec.strategies", "valid dictionary"),
]


@pytest.mark.parametrize(("strategies", "field", "reason"), [case[1:] for case in HOSTILE_POLICIES],
                         ids=[case[0] for case in HOSTILE_POLICIES])
def test_hostile_policy_is_refused_naming_the_field_and_the_reason(strategies, field, reason):
    with pytest.raises(PolicyError) as caught:
        parse_policy(_policy(strategies))
    assert (caught.value.field, reason in caught.value.reason) == (field, True), caught.value.reason


def test_a_huge_label_value_is_reported_in_a_short_warning_and_never_set():
    # TAS accepts any string as a label; the warning goes to the log, an Event and the status.
    policy = parse_policy(_policy({"labeling": {"rules": [{**RULE, "labels": ["k=" + "v" * 1_000_000]}]}}))
    assert [(w.field, w.reason) for w in policy.warnings] == [("spec.strategies.labeling.rules[0].labels[0]",
                                                               "InvalidLabel")]
    assert len(str(policy.warnings[0])) < 2000
    assert labeling.node_labels(policy, _snapshot({"health_metric": {"n": 1.0}}), ["n"]) == {}


@pytest.mark.parametrize(
    ("doc", "field"),
    [([_policy({"dontschedule": {"rules": [RULE]}})], "<root>"),
     ({**_policy({"dontschedule": {"rules": [RULE]}}), "spec": ["strategies"]}, "spec"),
     ({**_policy({"dontschedule": {"rules": [RULE]}}), "spec": None}, "spec"),
     ({**_policy({"dontschedule": {"rules": [RULE]}}), "kind": "Pod"}, "kind"),
     (_policy({"dontschedule": {"rules": [RULE]}}, name=7), "metadata.name")],
    ids=["document is a list", "spec is a list", "spec is null", "kind is not TASPolicy", "name is a number"],
)
def test_document_that_is_not_a_policy_is_refused_naming_the_field(doc, field):
    with pytest.raises(PolicyError) as caught:
        parse_policy(doc)
    assert caught.value.field == field


@pytest.mark.parametrize("metadata", [["name", "p"], {"name": "p", "generation": "first"}],
                         ids=["metadata is a list", "generation is not a number"])
def test_policy_with_unusable_metadata_is_refused_with_a_policy_error(metadata):
    with pytest.raises(PolicyError):
        parse_policy({**_policy({"dontschedule": {"rules": [RULE]}}), "metadata": metadata})


def test_mixed_operators_on_one_label_key_are_accepted_and_the_first_violated_rule_sets_the_value():
    # Refusing them is a behaviour change for TAS users; labeling.py documents the choice.
    policy = parse_policy(_policy({"labeling": {"rules": [
        {"metricname": "temperature", "operator": "GreaterThan", "target": 80, "labels": ["heat=high"]},
        {"metricname": "temperature", "operator": "LessThan", "target": 90, "labels": ["heat=low"]}]}}))
    snapshot = _snapshot({"temperature": {"hot": 95.0, "warm": 85.0, "cool": 20.0}})
    assert labeling.node_labels(policy, snapshot, ["hot", "warm", "cool"]) == {
        "hot": {"telemetry.aware.scheduling.p/heat": "high"},
        "warm": {"telemetry.aware.scheduling.p/heat": "high"},  # both rules break: the first wins
        "cool": {"telemetry.aware.scheduling.p/heat": "low"},
    }


GOOD = _policy({"dontschedule": {"rules": [RULE]}}, name="good")
BAD = _policy({"dontschedule": {"rules": [{**RULE, "metricname": "bad name"}] * 200}}, name="bad")
POD = {"namespace": "ns", "labels": {"telemetry-policy": "good"}}


def _engine(store: PolicyStore) -> Engine:
    source = _Fixed({"health_metric": {"node-1": 0.0, "node-2": 1.0}})
    engine = Engine(store, MetricCache(source, max_age=60))
    engine.cache.refresh(store.metric_names())
    engine.rebuild()
    return engine


def test_a_file_with_a_bad_and_a_good_policy_keeps_deciding_for_the_good_one(tmp_path):
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump_all([BAD, GOOD]))
    store = PolicyStore()
    store.replace_all(*load_policy_files([str(path)]))
    engine = _engine(store)
    assert [p.key for p in store.policies()] == ["ns/good"]
    assert {key: error.field for key, error in store.invalid().items()} == {
        f"{path}:bad": "spec.strategies.dontschedule.rules"}
    assert engine.failed(engine.policy_for(POD), ["node-1", "node-2"]) == {
        "node-2": "good: dontschedule rule health_metric Equals 1 violated (value 1)"}
    assert engine.policy_for({**POD, "labels": {"telemetry-policy": "bad"}}) is None


def test_a_policy_turning_bad_leaves_the_good_one_deciding():
    store = PolicyStore()
    store.put(parse_policy(GOOD))
    store.put(parse_policy({**BAD, "spec": GOOD["spec"]}))
    engine = _engine(store)
    with pytest.raises(PolicyError) as caught:
        parse_policy(BAD)
    store.put_invalid("ns/bad", caught.value)
    assert engine.failed(engine.policy_for(POD), ["node-1", "node-2"]) == {
        "node-2": "good: dontschedule rule health_metric Equals 1 violated (value 1)"}
    assert [p.key for p in store.policies()] == ["ns/good"]


# --- metric values --------------------------------------------------------------------------

DECIDING = parse_policy(_policy({
    "dontschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 1}]},
    "scheduleonmetric": {"rules": [{"metricname": "health_metric", "operator": "LessThan"}]},
    "deschedule": {"rules": [{"metricname": "health_metric", "operator": "GreaterThan", "target": 1}]},
}))
HEALTH = {"node-1": 0.0, "node-2": 1.0, "node-3": 2.0}  # the values every case sends besides its garbage
CANDIDATES = ["node-1", "node-2", "node-3", "node-x"]  # node-x is the node the garbage is about


class _Fixed:
    name = "fixed"

    def __init__(self, values: dict[str, dict[str, float]]):
        self.values = values

    def fetch(self, metrics):
        now = time.time()
        return {m: {n: Sample(v, now) for n, v in self.values.get(m, {}).items()} for m in metrics}


def _snapshot(values: dict[str, dict[str, float]]):
    cache = MetricCache(_Fixed(values), max_age=60)
    return cache.refresh(set(values))


def _decisions(source) -> dict:
    cache = MetricCache(source, max_age=60)
    snapshot = cache.refresh({"health_metric"})
    assert cache.source_up, cache.last_error
    return evaluate([DECIDING], snapshot, CANDIDATES)


# What every source must decide when node-x's value is garbage: as if node-x had sent nothing.
WITHOUT_GARBAGE = evaluate([DECIDING], _snapshot({"health_metric": HEALTH}), CANDIDATES)


def _textfile(tmp_path, extra: str) -> TextfileSource:
    path = tmp_path / "metrics.prom"
    good = [f'health_metric{{node="{n}"}} {v:g}\n' for n, v in HEALTH.items()]
    path.write_text("".join(["# TYPE health_metric gauge\n", good[0], extra, *good[1:]]))
    return TextfileSource(str(path))


@pytest.mark.parametrize(
    ("extra", "logged"),
    [('health_metric{node="node-x"} NaN\n', "is not a number"),
     ('health_metric{node="node-x"} +Inf\n', "is not a number"),
     ('health_metric{node="node-x"} -Inf\n', "is not a number"),
     ('health_metric{node="node-x"} 1e999\n', "is not a number"),
     ('health_metric{node="node-x"} lots\n', "ignoring line"),
     ('health_metric{node="node-x"} 0 yesterday\n', "ignoring line"),
     ('health_metric{node="node-x} 0\n', "ignoring line"),
     ("}}} not a metric at all {{{\n", "ignoring line"),
     ('health_metric{node="node-x"} 0\nhealth_metric{node="node-x"} 2\n', "conflicting values"),
     ('health_metric{node="node-x",zone="a"} 0\nhealth_metric{node="node-x",zone="b"} 2\n', "conflicting values"),
     ("health_metric 1\n", "without a node label"),
     ('health_metric{node=""} 1\n', "without a node label")],
    ids=["NaN", "+Inf", "-Inf", "overflow", "text value", "text timestamp", "broken label quoting",
         "junk line", "duplicate node, two values", "two series for one node", "no node label", "empty node"],
)
def test_garbage_in_the_metrics_file_is_dropped_with_a_reason_and_changes_no_decision(tmp_path, caplog, extra, logged):
    with caplog.at_level(logging.WARNING):
        decided = _decisions(_textfile(tmp_path, extra))
    assert decided == WITHOUT_GARBAGE
    assert logged in caplog.text


def _custom_metrics(items: list) -> CustomMetricsSource:
    class Response:
        status = 200
        data = orjson.dumps({"kind": "MetricValueList", "items": items})

        def read(self):
            return self.data

    class Api:
        def param_serialize(self, method, path, auth_settings):
            return method, path, {}, None, None

        def call_api(self, method, url, header_params, body, _request_timeout):
            return Response()

    return CustomMetricsSource(Api())


def _item(node: object, value: object, **extra) -> dict:
    return {"describedObject": {"kind": "Node", "name": node, "apiVersion": "/v1"},
            "metricName": "health_metric", "value": value, **extra}


GOOD_ITEMS = [_item(n, f"{v:g}") for n, v in HEALTH.items()]


@pytest.mark.parametrize(
    ("garbage", "logged"),
    [([_item("node-x", "NaN")], "not a finite number"),
     ([_item("node-x", "Inf")], "not a finite number"),
     ([_item("node-x", "-inf")], "not a finite number"),
     ([_item("node-x", "1e999")], "not a finite number"),
     ([_item("node-x", "lots")], "Invalid number format"),
     ([_item("node-x", "")], "Invalid number format"),
     ([_item("node-x", None)], "ignoring value None"),
     ([_item("node-x", True)], "boolean"),
     ([_item("node-x", ["0"])], "ignoring value"),
     ([_item("node-x", "0", timestamp="yesterday")], "ignoring value"),
     ([_item("node-x", "0"), _item("node-x", "2")], "conflicting values"),
     ([{"metricName": "health_metric", "value": "1"}], "no describedObject.name"),
     ([_item(None, "1")], "no describedObject.name"),
     ([_item(["node-x"], "1")], "no describedObject.name"),
     (["node-x=1"], "not an object")],
    ids=["NaN", "Inf", "-inf", "overflow", "text value", "empty value", "null value", "boolean value",
         "list value", "text timestamp", "duplicate node, two values", "no describedObject",
         "null node", "node is a list", "item is a string"],
)
def test_garbage_from_the_custom_metrics_api_is_dropped_with_a_reason_and_changes_no_decision(caplog, garbage, logged):
    with caplog.at_level(logging.WARNING):
        decided = _decisions(_custom_metrics(GOOD_ITEMS[:1] + garbage + GOOD_ITEMS[1:]))
    assert decided == WITHOUT_GARBAGE
    assert logged in caplog.text


def _prometheus(series: list) -> PrometheusSource:
    body = {"status": "success", "data": {"resultType": "vector", "result": series}}
    return PrometheusSource("http://prometheus:9090",
                            transport=httpx.MockTransport(lambda request: httpx.Response(200, json=body)),
                            node_addresses=lambda: {node: [] for node in CANDIDATES})


def _series(node: object, value: object, stamp: object = None) -> dict:
    return {"metric": {"node": node}, "value": [time.time() if stamp is None else stamp, value]}


@pytest.mark.parametrize(
    ("garbage", "logged"),
    [([_series("node-x", "NaN")], "not a finite number"),
     ([_series("node-x", "+Inf")], "not a finite number"),
     ([_series("node-x", "-Inf")], "not a finite number"),
     ([_series("node-x", "0", stamp="NaN")], "not a finite number"),
     ([_series("node-x", "lots")], "malformed series"),
     ([_series("node-x", "0", stamp="yesterday")], "malformed series"),
     ([{"metric": {"node": "node-x"}}], "malformed series"),
     ([{"metric": {"node": "node-x"}, "value": "0"}], "malformed series"),
     ([_series("node-x", "0"), _series("node-x", "2")], "conflicting values"),
     ([{"metric": {}, "value": [time.time(), "1"]}], "neither a node nor an instance label"),
     ([_series(["node-x"], "1")], "neither a node nor an instance label"),
     ([{"metric": {"instance": "10.9.9.9:9100"}, "value": [time.time(), "1"]}], "neither the name nor an address"),
     (["node-x 1"], "malformed series")],
    ids=["NaN", "+Inf", "-Inf", "NaN timestamp", "text value", "text timestamp", "no value",
         "value not a pair", "duplicate node, two values", "no node label", "node is a list",
         "instance of no node", "series is a string"],
)
def test_garbage_from_prometheus_is_dropped_with_a_reason_and_changes_no_decision(caplog, garbage, logged):
    good = [_series(n, f"{v:g}") for n, v in HEALTH.items()]
    with caplog.at_level(logging.WARNING):
        decided = _decisions(_prometheus(good[:1] + garbage + good[1:]))
    assert decided == WITHOUT_GARBAGE
    assert logged in caplog.text


def _stamp(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize("source", ["file", "custom-metrics", "prometheus"])
def test_a_node_sent_twice_with_one_value_counts_once(tmp_path, source):
    now = time.time()
    build = {
        "file": lambda: _textfile(tmp_path, 'health_metric{node="node-x"} 0\nhealth_metric{node="node-x"} 0\n'),
        "custom-metrics": lambda: _custom_metrics(
            GOOD_ITEMS + [_item("node-x", "0", timestamp=_stamp(now - 5)), _item("node-x", "0")]),
        "prometheus": lambda: _prometheus([_series(n, f"{v:g}") for n, v in HEALTH.items()]
                                          + [_series("node-x", "0", now - 5), _series("node-x", "0", now)]),
    }[source]
    expected = evaluate([DECIDING], _snapshot({"health_metric": {**HEALTH, "node-x": 0.0}}), CANDIDATES)
    assert _decisions(build()) == expected


@pytest.mark.parametrize("source", ["file", "custom-metrics", "prometheus"])
def test_values_for_nodes_nobody_asks_about_change_no_decision(tmp_path, source):
    strangers = [f"gone-{i}" for i in range(500)]
    build = {
        "file": lambda: _textfile(tmp_path, "".join(f'health_metric{{node="{n}"}} 1\n' for n in strangers)),
        "custom-metrics": lambda: _custom_metrics(GOOD_ITEMS + [_item(n, "1") for n in strangers]),
        "prometheus": lambda: _prometheus([_series(n, f"{v:g}") for n, v in HEALTH.items()]
                                          + [_series(n, "1") for n in strangers]),
    }[source]
    assert _decisions(build()) == WITHOUT_GARBAGE


@pytest.mark.parametrize("source", ["file", "custom-metrics", "prometheus"])
def test_negative_values_are_readings_and_are_decided_on(tmp_path, source):
    # A negative reading (a temperature, a delta) is not garbage: it is kept and ranks lowest-is-best.
    build = {
        "file": lambda: _textfile(tmp_path, 'health_metric{node="node-x"} -3\n'),
        "custom-metrics": lambda: _custom_metrics(GOOD_ITEMS + [_item("node-x", "-3")]),
        "prometheus": lambda: _prometheus([_series(n, f"{v:g}") for n, v in HEALTH.items()]
                                          + [_series("node-x", "-3")]),
    }[source]
    decided = _decisions(build())
    assert decided == evaluate([DECIDING], _snapshot({"health_metric": {**HEALTH, "node-x": -3.0}}), CANDIDATES)
    assert decided["policies"]["ns/p"]["scores"] == {"node-1": 4, "node-2": 2, "node-3": 0, "node-x": 10}
