"""The crane-style load-aware mode: policy, annotations, hotspot counting and the decisions."""

from __future__ import annotations

import math
import pathlib
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest
import yaml
from tas_extender.decide.load.annotations import (
    annotation_keys,
    format_value,
    fresh_values,
    parse_value,
)
from tas_extender.decide.load.decide import (
    combine,
    extender_score,
    final_score,
    hot_value,
    is_daemonset_pod,
    node_score,
    overloaded,
)
from tas_extender.decide.load.hotspot import BindingCounter
from tas_extender.decide.load.policy import (
    DEFAULT_POLICY,
    LoadPolicy,
    load_policy_file,
    parse_load_policy,
    policy_warnings,
)
from tas_extender.decide.policy import PolicyError

NOW = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)

# crane's deploy/manifests/dynamic/policy.yaml, which the TKE document's defaults describe.
CRANE_POLICY = (pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "crane" / "policy.yaml").read_text()


def _doc(**spec) -> dict:
    return {"apiVersion": "scheduler.policy.crane.io/v1alpha1", "kind": "DynamicSchedulerPolicy",
            "spec": spec}


def _policy(sync=None, limits=None, weights=None, hot=None) -> LoadPolicy:
    weights = weights or {"cpu": 1.0}
    sync = sync or {name: 180.0 for name in {*weights, *(limits or {})}}
    return LoadPolicy(sync=sync, limits=limits or {}, weights=weights, hot=hot or [], hot_formula="seed")


# ---------------------------------------------------------------- policy

def test_policy_defaults_equal_the_seed_documents_defaults():
    assert DEFAULT_POLICY.sync == {
        "cpu_usage_avg_5m": 180, "cpu_usage_max_avg_1h": 900, "cpu_usage_max_avg_1d": 10800,
        "mem_usage_avg_5m": 180, "mem_usage_max_avg_1h": 900, "mem_usage_max_avg_1d": 10800,
    }
    # The four pre-selection thresholds the TKE document lists: 5 min average and 1 h max, cpu and mem.
    assert DEFAULT_POLICY.limits == {
        "cpu_usage_avg_5m": 0.65, "cpu_usage_max_avg_1h": 0.75,
        "mem_usage_avg_5m": 0.65, "mem_usage_max_avg_1h": 0.75,
    }
    assert DEFAULT_POLICY.weights == {
        "cpu_usage_avg_5m": 0.2, "cpu_usage_max_avg_1h": 0.3, "cpu_usage_max_avg_1d": 0.5,
        "mem_usage_avg_5m": 0.2, "mem_usage_max_avg_1h": 0.3, "mem_usage_max_avg_1d": 0.5,
    }
    assert sorted(DEFAULT_POLICY.hot) == [(60, 2), (300, 5)]
    assert DEFAULT_POLICY.longest_hot_window == 300
    assert DEFAULT_POLICY.hot_formula == "seed"


@pytest.mark.parametrize("document", [None, {"apiVersion": "scheduler.policy.crane.io/v1alpha1",
                                             "kind": "DynamicSchedulerPolicy"}, {**_doc(), "spec": None}],
                         ids=["none", "no spec", "null spec"])
def test_no_policy_gives_the_seeds_defaults(document):
    assert parse_load_policy(document) == DEFAULT_POLICY


def test_cranes_own_policy_yaml_has_the_seeds_values_and_cranes_hot_formula():
    policy = parse_load_policy(yaml.safe_load(CRANE_POLICY))
    assert (policy.sync, policy.limits, policy.weights) == (DEFAULT_POLICY.sync, DEFAULT_POLICY.limits,
                                                            DEFAULT_POLICY.weights)
    assert policy.hot == DEFAULT_POLICY.hot and policy.hot_formula == "crane"
    assert policy_warnings(policy) == []


def test_policy_file_loads_and_a_missing_or_broken_file_is_named(tmp_path):
    good = tmp_path / "policy.yaml"
    good.write_text(CRANE_POLICY)
    assert load_policy_file(good) == parse_load_policy(yaml.safe_load(CRANE_POLICY))
    with pytest.raises(PolicyError) as missing:
        load_policy_file(tmp_path / "absent.yaml")
    assert "absent.yaml" in str(missing.value)
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec: [unclosed")
    with pytest.raises(PolicyError) as bad_yaml:
        load_policy_file(broken)
    assert "broken.yaml" in str(bad_yaml.value) and "YAML" in str(bad_yaml.value)
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(yaml.safe_dump(_doc(hotValue=[{"timeRange": "1m", "count": 0}])))
    with pytest.raises(PolicyError) as wrong:
        load_policy_file(invalid)
    assert "invalid.yaml" in wrong.value.field and "spec.hotValue[0].count" in wrong.value.field


def test_an_empty_predicate_list_means_no_filtering():
    assert parse_load_policy(_doc(predicate=[])).limits == {}


SYNC = [{"name": "cpu_usage_avg_5m", "period": "3m"}]
INVALID = [
    ("unknown top-level field", {**_doc(), "extra": 1}, "extra"),
    ("unknown spec field", _doc(weights=[]), "spec.weights"),
    ("unknown rule field", _doc(syncPolicy=[{**SYNC[0], "every": "1m"}]), "spec.syncPolicy[0].every"),
    ("wrong apiVersion", {**_doc(), "apiVersion": "v1"}, "apiVersion"),
    ("wrong kind", {**_doc(), "kind": "TASPolicy"}, "kind"),
    ("spec not an object", {**_doc(), "spec": []}, "spec"),
    ("bad metric name", _doc(syncPolicy=[{"name": "cpu-usage", "period": "3m"}]), "spec.syncPolicy[0].name"),
    ("metric name with space", _doc(predicate=[{"name": "cpu usage", "maxLimitPecent": 0.5}]),
     "spec.predicate[0].name"),
    ("missing apiVersion", {"kind": "DynamicSchedulerPolicy", "spec": {}}, "apiVersion"),
    ("missing kind", {"apiVersion": "scheduler.policy.crane.io/v1alpha1", "spec": {}}, "kind"),
    ("negative limit", _doc(predicate=[{"name": "cpu_usage_avg_5m", "maxLimitPecent": 0.5},
                                       {"name": "mem_usage_avg_5m", "maxLimitPecent": -0.1}]),
     "spec.predicate[1].maxLimitPecent"),
    ("limit as text", _doc(predicate=[{"name": "cpu_usage_avg_5m", "maxLimitPecent": "0.5"}]),
     "spec.predicate[0].maxLimitPecent"),
    ("limit NaN", _doc(predicate=[{"name": "cpu_usage_avg_5m", "maxLimitPecent": float("nan")}]),
     "spec.predicate[0].maxLimitPecent"),
    ("negative weight", _doc(priority=[{"name": "cpu_usage_avg_5m", "weight": -0.1}]),
     "spec.priority[0].weight"),
    ("infinite weight", _doc(priority=[{"name": "cpu_usage_avg_5m", "weight": float("inf")}]),
     "spec.priority[0].weight"),
    ("count zero", _doc(hotValue=[{"timeRange": "1m", "count": 0}]), "spec.hotValue[0].count"),
    ("count fractional", _doc(hotValue=[{"timeRange": "1m", "count": 1.5}]), "spec.hotValue[0].count"),
    ("count boolean", _doc(hotValue=[{"timeRange": "1m", "count": True}]), "spec.hotValue[0].count"),
    ("timeRange zero", _doc(hotValue=[{"timeRange": "0s", "count": 1}]), "spec.hotValue[0].timeRange"),
    ("timeRange negative", _doc(hotValue=[{"timeRange": "-1m", "count": 1}]), "spec.hotValue[0].timeRange"),
    ("timeRange without unit", _doc(hotValue=[{"timeRange": "60", "count": 1}]), "spec.hotValue[0].timeRange"),
    ("timeRange bad unit", _doc(hotValue=[{"timeRange": "1d", "count": 1}]), "spec.hotValue[0].timeRange"),
    ("period zero", _doc(syncPolicy=[{"name": "cpu_usage_avg_5m", "period": "0"}]),
     "spec.syncPolicy[0].period"),
    ("period as number", _doc(syncPolicy=[{"name": "cpu_usage_avg_5m", "period": 180}]),
     "spec.syncPolicy[0].period"),
    ("period missing", _doc(syncPolicy=[{"name": "cpu_usage_avg_5m"}]), "spec.syncPolicy[0].period"),
    ("duplicate sync metric", _doc(syncPolicy=SYNC * 2), "spec.syncPolicy[1].name"),
    ("duplicate priority", _doc(priority=[{"name": "a", "weight": 1}] * 2), "spec.priority[1].name"),
    ("duplicate hot window", _doc(hotValue=[{"timeRange": "1m", "count": 1}, {"timeRange": "60s", "count": 2}]),
     "spec.hotValue[1].timeRange"),
]


@pytest.mark.parametrize("document, field", [(d, f) for _, d, f in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_policy_is_rejected_naming_the_field(document, field):
    with pytest.raises(PolicyError) as error:
        parse_load_policy(document)
    assert error.value.field == field
    assert error.value.reason


def test_a_policy_that_is_not_an_object_is_rejected():
    with pytest.raises(PolicyError) as error:
        parse_load_policy(["spec"])  # type: ignore[arg-type]
    assert error.value.field == "<root>"


# ---------------------------------------------------------------- filter

FILTER = [
    ("strictly above the limit is filtered", {"cpu_usage_avg_5m": 0.82}, True),
    ("exactly at the limit passes", {"cpu_usage_avg_5m": 0.65}, False),
    ("below every limit passes", {"cpu_usage_avg_5m": 0.1, "cpu_usage_max_avg_1h": 0.7}, False),
    ("1h max above its own limit is filtered", {"cpu_usage_avg_5m": 0.1, "cpu_usage_max_avg_1h": 0.76}, True),
    ("missing data fails open", {}, False),
    ("a metric without a predicate never filters", {"cpu_usage_max_avg_1d": 0.99}, False),
]


@pytest.mark.parametrize("values, filtered", [(v, f) for _, v, f in FILTER], ids=[c[0] for c in FILTER])
def test_overloaded(values, filtered):
    assert (overloaded(DEFAULT_POLICY, values) is not None) is filtered


def test_overload_reason_names_metric_value_and_threshold():
    assert overloaded(DEFAULT_POLICY, {"cpu_usage_avg_5m": 0.82}) == "load: cpu_usage_avg_5m 0.82 above 0.65"


def test_overload_reason_lists_every_metric_above_its_limit():
    reason = overloaded(DEFAULT_POLICY, {"cpu_usage_avg_5m": 0.9, "mem_usage_max_avg_1h": 0.8})
    assert "cpu_usage_avg_5m 0.9 above 0.65" in reason and "mem_usage_max_avg_1h 0.8 above 0.75" in reason


def test_overload_reason_never_prints_a_value_equal_to_its_threshold():
    reason = overloaded(DEFAULT_POLICY, {"cpu_usage_avg_5m": 0.650001})
    assert "0.650001 above 0.65" in reason


# ---------------------------------------------------------------- score

ALL_AT = {name: 0.4 for name in DEFAULT_POLICY.weights}
SCORE = [
    ("idle node scores 100", _policy(weights={"a": 1, "b": 1}), {"a": 0.0, "b": 0.0}, 100),
    ("full node scores 0", _policy(weights={"a": 1, "b": 1}), {"a": 1.0, "b": 1.0}, 0),
    ("uniform usage gives its headroom", DEFAULT_POLICY, ALL_AT, 60),
    ("weighted sum over all metrics, truncated", _policy(weights={"a": 0.2, "b": 0.3, "c": 0.5}),
     {"a": 0.5, "b": 0.2, "c": 0.1}, 79),
]


@pytest.mark.parametrize("policy, values, expected", [c[1:] for c in SCORE], ids=[c[0] for c in SCORE])
def test_node_score(policy, values, expected):
    assert node_score(policy, values) == expected


def test_weights_need_not_sum_to_one():
    values = {"a": 0.3, "b": 0.6, "c": 0.9}
    fractions = node_score(_policy(weights={"a": 0.2, "b": 0.3, "c": 0.5}), values)
    integers = node_score(_policy(weights={"a": 2, "b": 3, "c": 5}), values)
    assert integers == fractions == 31


@pytest.mark.parametrize("score, hot, expected", [(60, 0, 60), (60, 1, 50), (60, 6, 0), (100, 0, 100)])
def test_final_score_takes_10_per_hot_point_and_clamps(score, hot, expected):
    assert final_score(score, hot) == expected


@pytest.mark.parametrize("score, expected", [
    (0, 0), (4.9, 0), (5, 1), (44.9, 4), (45, 5), (55, 6), (95, 10), (100, 10), (120, 10), (-3, 0),
    (math.nan, 0),
])
def test_extender_score_maps_0_100_to_0_10_rounding_half_up(score, expected):
    assert extender_score(score) == expected


COMBINE = [
    ("no policy gives the load score", (None, 7), 7),
    ("equal weights average", (4, 7), 6),  # 5.5 rounds half up
    ("equal scores stay", (8, 8), 8),
    ("policy weighted twice", (10, 1, 2.0, 1.0), 7),
    ("load weighted twice", (10, 1, 1.0, 2.0), 4),
    ("policy weight zero gives the load score", (10, 3, 0.0, 1.0), 3),
    ("load weight zero gives the policy score", (10, 3, 1.0, 0.0), 10),
    ("fractional weights round half up", (3, 6, 0.5, 0.5), 5),  # 4.5
]


@pytest.mark.parametrize("args, expected", [c[1:] for c in COMBINE], ids=[c[0] for c in COMBINE])
def test_combine(args, expected):
    assert combine(*args) == expected


@pytest.mark.parametrize("weights", [(0.0, 0.0), (-1.0, 2.0)])
def test_combine_rejects_unusable_weights(weights):
    with pytest.raises(ValueError):
        combine(5, 5, *weights)


# ---------------------------------------------------------------- hotspot

def _counter(*times: float, node: str = "n1", keep: float = 300) -> BindingCounter:
    counter = BindingCounter(keep=keep)
    for when in times:
        counter.record(node, when)
    return counter


@pytest.mark.parametrize("times, expected", [
    ((940,), 0),  # exactly at now - window is outside
    ((940.001,), 1),  # just inside
    ((1000,), 1),  # now itself counts
    ((1000.5,), 0),  # later than now is not counted
    ((900, 940, 950, 999), 2),
])
def test_binding_count_window_edges(times, expected):
    assert _counter(*times).count("n1", 60, now=1000) == expected


def test_an_unknown_node_has_no_bindings():
    assert _counter(990).count("other", 60, now=1000) == 0


HOT = [
    ("two pods in a minute cost nothing", (990, 995), 0),
    ("three pods in a minute cost one point", (990, 995, 999), 1),
    ("four pods in a minute still cost one point", (980, 990, 995, 999), 1),
    ("five pods in five minutes cost nothing", (750, 800, 850, 900, 999), 0),
    ("six pods in five minutes, three in the last minute, cost two points",
     (750, 800, 850, 950, 980, 999), 2),
    ("six pods in five minutes, one in the last minute, cost one point", (750, 800, 850, 900, 930, 999), 1),
    ("bindings older than five minutes cost nothing", (600, 650, 690, 699, 700), 0),
]


@pytest.mark.parametrize("times, points", [c[1:] for c in HOT], ids=[c[0] for c in HOT])
def test_hot_value_with_the_seeds_rules(times, points):
    # The seed: a point when more than 2 pods landed in the last minute, one more when more than 5 in 5.
    counter = _counter(*times)
    counts = [counter.count("n1", window, now=1000) for window, _ in DEFAULT_POLICY.hot]
    assert hot_value(DEFAULT_POLICY, counts) == points


def test_bindings_recorded_out_of_order_are_still_counted():
    assert _counter(999, 950, 990).count("n1", 60, now=1000) == 3


def test_record_drops_what_no_hot_window_can_see():
    counter = BindingCounter(keep=60)
    for second in range(0, 10_000, 5):
        counter.record(f"node-{second % 7}", float(second))
    # At most 60 s of history per node survives, whatever ran before.
    assert counter.size() <= 7 * (60 // 5 + 1) + 7
    assert counter.count("node-0", 60, now=9995.0) > 0


def test_nodes_that_stop_getting_pods_are_swept():
    counter = BindingCounter(keep=60)
    counter.record("quiet", 0.0)
    for second in range(100, 400):
        counter.record("busy", float(second))
    assert counter.count("quiet", 10_000, now=400.0) == 0
    assert counter.size() <= 61


def test_prune_keeps_only_the_last_keep_seconds():
    counter = _counter(10, 50, 60, 60.5, 99, keep=10_000)
    counter.record("n2", 20)
    counter.prune(now=100, keep=40)
    assert counter.count("n1", 1_000, now=100) == 2  # 60 is exactly now - keep: dropped; 60.5 stays
    assert counter.count("n2", 1_000, now=100) == 0
    assert counter.size() == 2


def test_forget_drops_a_nodes_history():
    counter = _counter(990, 995)
    counter.forget("n1")
    assert counter.count("n1", 60, now=1000) == 0


def test_counter_is_safe_across_threads():
    counter = BindingCounter(keep=10_000)

    def bind(base: int) -> None:
        for i in range(500):
            counter.record("n1", float(base + i))

    threads = [threading.Thread(target=bind, args=(k * 1000,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counter.count("n1", 10_000, now=5000.0) == 2000


# ---------------------------------------------------------------- annotations (crane-exact edges: test_crane_compat.py)

@pytest.mark.parametrize("value, text", [
    (0.425, "0.42500,2026-11-22T10:00:00Z"),
    (0.0, "0.00000,2026-11-22T10:00:00Z"),
    (1.0, "1.00000,2026-11-22T10:00:00Z"),
    (0.123456789, "0.12346,2026-11-22T10:00:00Z"),
    (1.25, "1.25000,2026-11-22T10:00:00Z"),
])
def test_format_value_writes_a_fraction_with_five_decimals_and_utc_with_a_real_z(value, text):
    assert format_value(value, NOW) == text


def test_format_value_converts_other_zones_to_utc():
    tokyo = NOW.astimezone(timezone(timedelta(hours=9)))
    assert format_value(0.01, tokyo) == "0.01000,2026-11-22T10:00:00Z"


@pytest.mark.parametrize("value", [math.nan, math.inf, -0.1])
def test_format_value_refuses_a_naive_time_or_a_value_crane_would_not_read(value):
    with pytest.raises(ValueError):
        format_value(0.5, NOW.replace(tzinfo=None))
    with pytest.raises(ValueError):
        format_value(value, NOW)


@pytest.mark.parametrize("value", [0.0, 1e-5, 0.3333333, 0.65, 0.9999999, 1.0])
def test_annotation_round_trips(value):
    parsed, taken = parse_value(format_value(value, NOW))
    assert parsed == pytest.approx(value, abs=5e-6)
    assert taken == NOW


GARBAGE = [
    ("NaN", "nan,2026-11-22T10:00:00Z"),
    ("infinite", "inf,2026-11-22T10:00:00Z"),
    ("negative", "-0.5,2026-11-22T10:00:00Z"),
    ("non-numeric", "high,2026-11-22T10:00:00Z"),
    ("underscored number", "0_5,2026-11-22T10:00:00Z"),
    ("empty value", ",2026-11-22T10:00:00Z"),
    ("missing comma", "0.5 2026-11-22T10:00:00Z"),
    ("value only", "0.5"),
    ("naive timestamp", "0.5,2026-11-22T10:00:00"),
    ("offset instead of Z", "0.5,2026-11-22T18:00:00+08:00"),
    ("space before the time", "0.5, 2026-11-22T10:00:00Z"),
    ("date only", "0.5,2026-11-22"),
    ("unix timestamp", "0.5,1795255200"),
    ("two commas", "0.5,2026-11-22T10:00:00Z,x"),
    ("impossible date", "0.5,2026-02-30T10:00:00Z"),
    ("empty", ""),
]


@pytest.mark.parametrize("text", [t for _, t in GARBAGE], ids=[n for n, _ in GARBAGE])
def test_garbage_annotation_is_rejected_with_a_reason(text):
    with pytest.raises(ValueError) as error:
        parse_value(text)
    assert str(error.value)


@pytest.mark.parametrize("text", [t for _, t in GARBAGE], ids=[n for n, _ in GARBAGE])
def test_garbage_annotation_is_treated_as_missing(text):
    annotations = {"cpu_usage_avg_5m": text, "mem_usage_avg_5m": "0.20000,2026-11-22T10:00:00Z"}
    assert fresh_values(annotations, DEFAULT_POLICY, NOW) == {"mem_usage_avg_5m": 0.2}


def test_fractional_seconds_are_read_as_go_reads_them():
    assert parse_value("0.5,2026-11-22T10:00:00.250Z") == (0.5, NOW + timedelta(milliseconds=250))


def test_fresh_values_use_each_metrics_own_period_and_ignore_unsynced_keys():
    nineteen_minutes_ago = format_value(0.3, NOW - timedelta(minutes=19))
    annotations = {
        "cpu_usage_avg_5m": nineteen_minutes_ago,  # 3 m period: stale
        "cpu_usage_max_avg_1h": nineteen_minutes_ago,  # 15 m period: valid until 20 m
        "cpu_usage_max_avg_1d": "1.00000,2026-11-22T10:00:00Z",
        "some.other/annotation": "0.05000,2026-11-22T10:00:00Z",
    }
    assert fresh_values(annotations, DEFAULT_POLICY, NOW) == {
        "cpu_usage_max_avg_1h": 0.3, "cpu_usage_max_avg_1d": 1.0}


def test_annotation_keys_are_the_synced_metric_names_and_the_hot_value():
    assert set(annotation_keys(DEFAULT_POLICY)) == {*DEFAULT_POLICY.sync, "node_hot_value"}


def test_annotated_overloaded_node_is_filtered_end_to_end():
    annotations = {"cpu_usage_avg_5m": "0.82000,2026-11-22T09:59:00Z"}
    values = fresh_values(annotations, DEFAULT_POLICY, NOW)
    assert overloaded(DEFAULT_POLICY, values) == "load: cpu_usage_avg_5m 0.82 above 0.65"


# ---------------------------------------------------------------- DaemonSet pods

@pytest.mark.parametrize("metadata, expected", [
    ({"ownerReferences": [{"kind": "DaemonSet", "name": "node-exporter"}]}, True),
    ({"ownerReferences": [{"kind": "ReplicaSet"}, {"kind": "DaemonSet"}]}, True),
    ({"ownerReferences": [{"kind": "ReplicaSet", "name": "web-5d8f"}]}, False),
    ({"ownerReferences": None}, False),
    ({"ownerReferences": ["DaemonSet"]}, False),
    ({}, False),
    (None, False),
], ids=["daemonset", "several owners", "replicaset", "null owners", "malformed owner", "no owners", "none"])
def test_daemonset_pods_are_recognised_by_owner(metadata, expected):
    assert is_daemonset_pod(metadata) is expected
