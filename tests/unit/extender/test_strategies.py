"""The four strategies and the rules under them, as pure functions over a metric snapshot."""

from __future__ import annotations

import pytest

from tas_extender.decide.metrics import Sample, Snapshot
from tas_extender.decide.policy import parse_policy
from tas_extender.decide.rules import breaks
from tas_extender.decide.policy import Rule
from tas_extender.decide.strategies import deschedule, dontschedule, labeling, scheduleonmetric

NOW = 1_000_000.0


def snap(values: dict[str, dict[str, float]], ages: dict[tuple[str, str], float] | None = None,
         max_age: float = 60) -> Snapshot:
    ages = ages or {}
    samples = {m: {n: Sample(v, NOW - ages.get((m, n), 0)) for n, v in by.items()} for m, by in values.items()}
    return Snapshot.build(samples, NOW, max_age)


def policy(strategies: dict, name: str = "p"):
    return parse_policy({"kind": "TASPolicy", "metadata": {"name": name, "namespace": "ns"},
                         "spec": {"strategies": strategies}})


@pytest.mark.parametrize(
    ("operator", "target", "value", "broken"),
    [
        ("LessThan", 10, 9, True), ("LessThan", 10, 10, False), ("LessThan", 10, 11, False),
        ("GreaterThan", 10, 11, True), ("GreaterThan", 10, 10, False), ("GreaterThan", 10, 9, False),
        ("Equals", 2, 2, True), ("Equals", 2, 2.5, False), ("Equals", -1, -1, True),
    ],
)
def test_each_operator_compares_value_with_target(operator, target, value, broken):
    assert breaks(Rule(metricname="m", operator=operator, target=target), value) is broken


DEMO = {"dontschedule": {"rules": [
    {"metricname": "health_metric", "operator": "Equals", "target": 1},
    {"metricname": "health_metric", "operator": "Equals", "target": 2}]}}


def test_node_breaking_any_dontschedule_rule_is_filtered_with_a_reason_naming_it():
    failed = dontschedule.failed_nodes(policy(DEMO, "demo-policy"),
                                       snap({"health_metric": {"a": 0, "b": 1, "c": 2}}), ["a", "b", "c"])
    assert failed == {
        "b": "demo-policy: dontschedule rule health_metric Equals 1 violated (value 1)",
        "c": "demo-policy: dontschedule rule health_metric Equals 2 violated (value 2)",
    }


def test_all_of_filters_only_nodes_breaking_every_rule():
    p = policy({"dontschedule": {"logicalOperator": "allOf", "rules": [
        {"metricname": "temp", "operator": "GreaterThan", "target": 80},
        {"metricname": "load", "operator": "GreaterThan", "target": 5}]}})
    s = snap({"temp": {"a": 90, "b": 90, "c": 10}, "load": {"a": 9, "b": 1, "c": 9}})
    failed = dontschedule.failed_nodes(p, s, ["a", "b", "c"])
    assert list(failed) == ["a"]
    assert "temp GreaterThan 80 violated (value 90) and load GreaterThan 5 violated (value 9)" in failed["a"]


@pytest.mark.parametrize(("fail_closed", "filtered"), [(False, []), (True, ["b"])])
def test_missing_metric_fails_open_unless_told_to_fail_closed(fail_closed, filtered):
    failed = dontschedule.failed_nodes(policy(DEMO), snap({"health_metric": {"a": 0}}), ["a", "b"], fail_closed)
    assert sorted(failed) == filtered
    if fail_closed:
        assert "health_metric missing or stale" in failed["b"]


def test_stale_metric_counts_as_missing():
    s = snap({"health_metric": {"a": 1, "b": 1}}, ages={("health_metric", "b"): 120}, max_age=60)
    assert s.get("health_metric", "a") == 1 and s.get("health_metric", "b") is None
    assert list(dontschedule.failed_nodes(policy(DEMO), s, ["a", "b"])) == ["a"]


def test_non_finite_values_are_ignored():
    s = snap({"health_metric": {"a": float("nan"), "b": float("inf")}})
    assert s.get("health_metric", "a") is None and s.get("health_metric", "b") is None


LESS = {"scheduleonmetric": {"rules": [{"metricname": "m", "operator": "LessThan"}]}}
GREATER = {"scheduleonmetric": {"rules": [{"metricname": "m", "operator": "GreaterThan"}]}}


def test_scores_are_proportional_within_zero_to_ten_for_many_nodes():
    nodes = [f"n{i}" for i in range(25)]
    s = snap({"m": {n: i * 4 for i, n in enumerate(nodes)}})  # 0..96
    low_is_good = scheduleonmetric.scores(policy(LESS), s, nodes)
    high_is_good = scheduleonmetric.scores(policy(GREATER), s, nodes)
    assert all(0 <= v <= 10 for v in low_is_good.values())
    assert low_is_good["n0"] == 10 and low_is_good["n24"] == 0 and low_is_good["n12"] == 5
    assert high_is_good["n24"] == 10 and high_is_good["n0"] == 0
    ordered = [low_is_good[n] for n in nodes]
    assert ordered == sorted(ordered, reverse=True)


def test_equal_values_score_equally_and_a_node_without_the_metric_scores_zero():
    s = snap({"m": {"a": 5, "b": 5, "c": 9}})
    scores = scheduleonmetric.scores(policy(LESS), s, ["a", "b", "c", "d"])
    assert scores == {"a": 10, "b": 10, "c": 0, "d": 0}
    assert scheduleonmetric.scores(policy(LESS), snap({"m": {"a": 3, "b": 3}}), ["a", "b"]) == {"a": 10, "b": 10}


def test_scores_use_every_rule_and_equals_rewards_the_target():
    p = policy({"scheduleonmetric": {"rules": [
        {"metricname": "m", "operator": "LessThan"},
        {"metricname": "e", "operator": "Equals", "target": 1}]}})
    s = snap({"m": {"a": 0, "b": 10}, "e": {"a": 0, "b": 1}})
    assert scheduleonmetric.scores(p, s, ["a", "b"]) == {"a": 5, "b": 5}


def test_deschedule_lists_violating_nodes_and_never_missing_ones():
    p = policy({"deschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 2}]}})
    s = snap({"health_metric": {"a": 2, "b": 0}})
    assert deschedule.violating_nodes(p, s, ["a", "b", "c"]) == ["a"]


LABELING = {"labeling": {"rules": [
    {"metricname": "temp", "operator": "GreaterThan", "target": 50, "labels": ["heat=high"]},
    {"metricname": "power", "operator": "GreaterThan", "target": 50, "labels": ["heat=power"]},
    {"metricname": "free", "operator": "LessThan", "target": 10, "labels": ["memory=low", "heat=mem"]},
]}}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"temp": 60, "power": 90, "free": 50}, {"heat": "power"}),  # GreaterThan: largest wins
        ({"temp": 95, "power": 60, "free": 50}, {"heat": "high"}),
        ({"temp": 0, "power": 0, "free": 5}, {"heat": "mem", "memory": "low"}),
        ({"temp": 60, "power": 0, "free": 5}, {"heat": "high", "memory": "low"}),  # first rule wins across operators
        ({"temp": 0, "power": 0, "free": 50}, None),
    ],
)
def test_labeling_picks_the_extreme_violated_rule_for_a_shared_key(values, expected):
    s = snap({m: {"n": v} for m, v in values.items()})
    labels = labeling.node_labels(policy(LABELING, "lp"), s, ["n"]).get("n")
    if expected is None:
        assert labels is None
    else:
        assert labels == {f"telemetry.aware.scheduling.lp/{k}": v for k, v in expected.items()}


def test_labeling_less_than_keeps_the_smallest_value():
    p = policy({"labeling": {"rules": [
        {"metricname": "a", "operator": "LessThan", "target": 10, "labels": ["k=a"]},
        {"metricname": "b", "operator": "LessThan", "target": 10, "labels": ["k=b"]}]}})
    s = snap({"a": {"n": 5}, "b": {"n": 2}})
    assert labeling.node_labels(p, s, ["n"]) == {"n": {"telemetry.aware.scheduling.p/k": "b"}}
