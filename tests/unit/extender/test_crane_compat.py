"""A crane policy file gives crane's decisions: each case states what gocrane/crane-scheduler decides.

The facts come from crane-scheduler's own code (paths below are in that repository):
- pkg/plugins/dynamic/plugins.go: Filter (DaemonSet pods pass; a predicate whose metric has no
  sync period is skipped), Score (score - int(hotValue * 10), clamped to 0..100);
- pkg/plugins/dynamic/stats.go: getResourceUsage (`<value>,<time>`, exactly one comma, value
  >= 0, no upper bound), inActivePeriod (fresh while now < time + period + 5 m), isOverLoad
  (strictly above; maxLimitPecent 0 switches the predicate off), getNodeScore (a metric without
  data adds 0 but keeps its weight; int() truncates; no priority scores 0);
- pkg/controller/annotator/node.go: the hot value is sum(bindings in window // count), written
  with the load; binding.go: a binding counts while its time > now - window;
- pkg/controller/prometheus/prometheus.go: the annotator writes `<metric> / 100` with 5 decimals;
- pkg/utils/utils.go: the time layout 2006-01-02T15:04:05Z (a literal Z);
- pkg/plugins/apis/policy/v1alpha1/types.go and deploy/manifests/dynamic/policy.yaml: the
  document; a section left out is an empty list (no defaulting in the scheme).
Where this project decides otherwise on purpose, the case says "ours" and why.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tas_extender.decide import decision
from tas_extender.decide.load.decide import LoadState, crane_scores, load_failed
from tas_extender.decide.load.hotspot import BindingCounter
from tas_extender.decide.load.policy import (
    DEFAULT_POLICY,
    LoadPolicy,
    parse_load_policy,
    policy_warnings,
)
from tas_extender.decide.policy import PolicyError

NOW = datetime(2026, 1, 2, 15, 4, 5, tzinfo=UTC)
API = {"apiVersion": "scheduler.policy.crane.io/v1alpha1", "kind": "DynamicSchedulerPolicy"}
# deploy/manifests/dynamic/policy.yaml, as shipped.
SYNC = [{"name": n, "period": p} for n, p in (
    ("cpu_usage_avg_5m", "3m"), ("cpu_usage_max_avg_1h", "15m"), ("cpu_usage_max_avg_1d", "3h"),
    ("mem_usage_avg_5m", "3m"), ("mem_usage_max_avg_1h", "15m"), ("mem_usage_max_avg_1d", "3h"))]
PREDICATE = [{"name": n, "maxLimitPecent": v} for n, v in (
    ("cpu_usage_avg_5m", 0.65), ("cpu_usage_max_avg_1h", 0.75),
    ("mem_usage_avg_5m", 0.65), ("mem_usage_max_avg_1h", 0.75))]
PRIORITY = [{"name": n, "weight": w} for n, w in (
    ("cpu_usage_avg_5m", 0.2), ("cpu_usage_max_avg_1h", 0.3), ("cpu_usage_max_avg_1d", 0.5),
    ("mem_usage_avg_5m", 0.2), ("mem_usage_max_avg_1h", 0.3), ("mem_usage_max_avg_1d", 0.5))]
HOT = [{"timeRange": "5m", "count": 5}, {"timeRange": "1m", "count": 2}]
FULL = {"syncPolicy": SYNC, "predicate": PREDICATE, "priority": PRIORITY, "hotValue": HOT}


def crane_policy(**spec) -> LoadPolicy:
    """crane's shipped policy with some sections replaced (None: the section left out)."""
    merged = {**FULL, **spec}
    return parse_load_policy({**API, "spec": {k: v for k, v in merged.items() if v is not None}})


def stamp(age: float = 0.0) -> str:
    """crane's layout for a time `age` seconds ago, in UTC (crane run with TZ=UTC)."""
    return (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(**fractions: float) -> dict[str, str]:
    """A node's annotations as crane's annotator writes them, read just now."""
    return {metric: f"{value:.5f},{stamp()}" for metric, value in fractions.items()}


def state(policy: LoadPolicy, nodes: dict[str, dict[str, str]],
          bindings: dict[str, list[float]] | None = None) -> LoadState:
    counter, now = BindingCounter(3600), NOW.timestamp()
    for name, ages in (bindings or {}).items():
        for age in ages:
            counter.record(name, now - age)
    return LoadState(policy, now, nodes.get, lambda n, window: counter.count(n, window, now))


def filtered(policy: LoadPolicy, annotations: dict[str, str]) -> bool:
    return "n" in load_failed(state(policy, {"n": annotations}), ["n"])


def score(policy: LoadPolicy, annotations: dict[str, str], bindings: list[float] | None = None) -> int:
    return crane_scores(state(policy, {"n": annotations}, {"n": bindings or []}), ["n"])[0]


ONLY_CPU_5M = {"syncPolicy": SYNC, "predicate": [PREDICATE[0]], "priority": [], "hotValue": []}

# ---------------------------------------------------------------- annotations: format and freshness

READ = [
    # prometheus.go writes FormatFloat(v/100, 'f', 5): 90 % is 0.90000.
    ("crane's fraction is a fraction: 90 % busy is filtered", f"0.90000,{stamp()}", True),
    ("0.65000 is at the threshold and passes", f"0.65000,{stamp()}", False),
    ("0.65001 is just above and is filtered", f"0.65001,{stamp()}", True),
    # stats.go: no upper bound on the value.
    ("a value above 1 is read as it is", f"1.20000,{stamp()}", True),
    # stats.go: a negative value is an error, so the metric is missing and the node passes.
    ("a negative value is missing", f"-0.90000,{stamp()}", False),
    # stats.go: strings.Split must give exactly two parts.
    ("a second comma makes it missing", f"0.90000,{stamp()},x", False),
    # utils.go: the layout ends in a literal Z; Go's time.Parse refuses an offset there.
    ("an offset instead of Z is missing", "0.90000," + (NOW + timedelta(hours=8)).strftime("%Y-%m-%dT%H:%M:%S+08:00"), False),
    # Go's time.Parse reads fractional seconds the layout does not name.
    ("fractional seconds are read", f"0.90000,{stamp()[:-1]}.5Z", True),
    # stats.go inActivePeriod: now.Before(time + 3 m + 5 m).
    ("479 s old (period 3 m + 5 m - 1 s) is fresh", f"0.90000,{stamp(479)}", True),
    ("480 s old is stale by the strict Before", f"0.90000,{stamp(480)}", False),
    ("481 s old, stale by one second, is missing", f"0.90000,{stamp(481)}", False),
    # Ours: crane keeps a stamp from the future fresh until it is period + 5 m old; here one more
    # than 5 minutes ahead is missing, so crane's Asia/Shanghai time behind a Z is not kept for 8 h.
    ("ours: 300 s in the future is fresh", f"0.90000,{(NOW + timedelta(seconds=300)).strftime('%Y-%m-%dT%H:%M:%SZ')}", True),
    ("ours: 301 s in the future is missing", f"0.90000,{(NOW + timedelta(seconds=301)).strftime('%Y-%m-%dT%H:%M:%SZ')}", False),
    ("ours: crane's Shanghai time behind a Z is missing", f"0.90000,{(NOW + timedelta(hours=8)).strftime('%Y-%m-%dT%H:%M:%SZ')}", False),
]


@pytest.mark.parametrize("text, is_filtered", [c[1:] for c in READ], ids=[c[0] for c in READ])
def test_annotations_are_read_as_crane_reads_them(text, is_filtered):
    assert filtered(crane_policy(**ONLY_CPU_5M), {"cpu_usage_avg_5m": text}) is is_filtered


def test_each_metric_is_fresh_for_its_own_period_plus_5_minutes():
    # stats.go getActiveDuration: the metric's own syncPolicy period + ExtraActivePeriod (5 m).
    policy = crane_policy(predicate=[PREDICATE[1]])  # cpu_usage_max_avg_1h, period 15 m
    assert filtered(policy, {"cpu_usage_max_avg_1h": f"0.80000,{stamp(1199)}"})
    assert not filtered(policy, {"cpu_usage_max_avg_1h": f"0.80000,{stamp(1200)}"})


# ---------------------------------------------------------------- filter

FILTER = [
    # stats.go isOverLoad: usage > maxLimitPecent, strictly.
    ("equal to the threshold passes", {}, {"cpu_usage_avg_5m": 0.65}, False),
    ("just above the threshold is filtered", {}, {"cpu_usage_avg_5m": 0.65001}, True),
    ("the 1 h maximum has its own threshold", {}, {"cpu_usage_max_avg_1h": 0.76}, True),
    ("memory counts as cpu does", {}, {"mem_usage_avg_5m": 0.66}, True),
    ("a metric with no predicate never filters", {}, {"cpu_usage_max_avg_1d": 0.99}, False),
    ("no data at all passes", {}, {}, False),
    # stats.go: "threshold was set as 0 means that the filter according to this metric is useless".
    ("a 0 limit switches the predicate off, even at 100 %",
     {"predicate": [{"name": "cpu_usage_avg_5m", "maxLimitPecent": 0}]}, {"cpu_usage_avg_5m": 1.0}, False),
    ("a 0 limit leaves the other predicates on",
     {"predicate": [{"name": "cpu_usage_avg_5m", "maxLimitPecent": 0}, PREDICATE[2]]},
     {"cpu_usage_avg_5m": 1.0, "mem_usage_avg_5m": 0.9}, True),
    ("a limit above 1 filters only usage above it",
     {"predicate": [{"name": "cpu_usage_avg_5m", "maxLimitPecent": 1.1}]}, {"cpu_usage_avg_5m": 1.0}, False),
    ("a limit above 1 filters usage above it",
     {"predicate": [{"name": "cpu_usage_avg_5m", "maxLimitPecent": 1.1}]}, {"cpu_usage_avg_5m": 1.2}, True),
    # v1alpha1 types.go + no defaulting: a left-out section is empty.
    ("without a predicate section nothing is filtered", {"predicate": None}, {"cpu_usage_avg_5m": 1.0}, False),
    # plugins.go Filter: getActiveDuration fails for a metric not in syncPolicy -> continue.
    ("a predicate on a metric not in syncPolicy is skipped even with data",
     {"syncPolicy": SYNC[1:]}, {"cpu_usage_avg_5m": 0.99}, False),
    ("without a syncPolicy section nothing is filtered", {"syncPolicy": None}, {"cpu_usage_avg_5m": 0.99}, False),
]


@pytest.mark.parametrize("spec, fractions, is_filtered", [c[1:] for c in FILTER], ids=[c[0] for c in FILTER])
def test_filter_decides_as_crane(spec, fractions, is_filtered):
    assert filtered(crane_policy(**spec), node(**fractions)) is is_filtered


def test_a_stale_overloaded_metric_does_not_filter():
    stale = {"cpu_usage_avg_5m": f"0.99000,{stamp(480)}"}
    assert not filtered(crane_policy(), stale)


def test_daemonset_pods_are_never_filtered_by_load():
    # plugins.go Filter: utils.IsDaemonsetPod -> Success.
    load = state(crane_policy(), {"n": node(cpu_usage_avg_5m=0.99)})
    daemon = {"ownerReferences": [{"kind": "DaemonSet", "name": "agent"}]}
    assert decision.filter_nodes(daemon, ["n"], {}, load) == {}
    assert decision.filter_nodes({"name": "web"}, ["n"], {}, load) == {"n": "load: cpu_usage_avg_5m 0.99 above 0.65"}


# ---------------------------------------------------------------- score

EVERY = {metric["name"]: 0.4 for metric in SYNC}
SCORE = [
    # stats.go getNodeScore: sum (1 - u) * w * 100 / sum w, then int() (truncation).
    ("every metric at 40 % scores 60", {}, EVERY, 60),
    ("cpu 30 %, memory 10 %: (70 * 1 + 90 * 1) / 2 = 80", {},
     {**{m: 0.3 for m in EVERY if m.startswith("cpu")}, **{m: 0.1 for m in EVERY if m.startswith("mem")}}, 80),
    ("the mean is truncated, not rounded: 79.9 scores 79",
     {"priority": [{"name": "cpu_usage_avg_5m", "weight": 1}]}, {"cpu_usage_avg_5m": 0.201}, 79),
    # getScore fails for a metric without data: it adds 0 but its weight stays in the sum.
    ("a missing metric counts as no headroom",
     {}, {m: 0.4 for m in EVERY if m != "cpu_usage_max_avg_1d"}, 45),  # 60 * (2 - 0.5) / 2
    ("no data at all scores 0", {}, {}, 0),
    ("a metric not in syncPolicy adds 0 and keeps its weight",
     {"syncPolicy": [s for s in SYNC if s["name"] != "mem_usage_max_avg_1d"]}, EVERY, 45),
    # A zero weight adds nothing to either sum.
    ("a zero weight changes nothing",
     {"priority": [*PRIORITY, {"name": "extra_metric", "weight": 0}]}, EVERY, 60),
    ("weights need not sum to 1", {"priority": [{**p, "weight": p["weight"] * 10} for p in PRIORITY]}, EVERY, 60),
    # getNodeScore: no priority policy -> every node scores 0.
    ("without a priority section every node scores 0", {"priority": None}, {}, 0),
    ("without a priority section an idle node scores 0 too", {"priority": None}, {m: 0.0 for m in EVERY}, 0),
    # Ours: crane divides 0 by 0 (int(NaN)); every node scores 0 here, as in crane for a node that is not hot.
    ("ours: weights all 0 score 0", {"priority": [{**p, "weight": 0} for p in PRIORITY]}, EVERY, 0),
    # No upper bound on usage: the term goes negative and NormalizeScore clamps the result at 0.
    ("usage above 100 % clamps at 0", {"priority": [PRIORITY[0]]}, {"cpu_usage_avg_5m": 1.5}, 0),
    ("an idle node scores 100", {}, {m: 0.0 for m in EVERY}, 100),
]


@pytest.mark.parametrize("spec, fractions, expected", [c[1:] for c in SCORE], ids=[c[0] for c in SCORE])
def test_score_is_cranes(spec, fractions, expected):
    assert score(crane_policy(**spec), node(**fractions)) == expected


def test_a_stale_metric_scores_as_missing():
    annotations = {**node(**{m: 0.4 for m in EVERY if m != "cpu_usage_avg_5m"}),
                   "cpu_usage_avg_5m": f"0.40000,{stamp(480)}"}
    assert score(crane_policy(), annotations) == 54  # 60 * (2 - 0.2) / 2


def test_the_order_of_scores_is_cranes_on_the_extender_scale():
    # The extender protocol scores 0..10: crane's 0..100 is rounded half up, so the order is
    # kept but nearby nodes can tie.
    nodes = {f"n{cpu}": node(**{m: cpu / 100 if m.startswith("cpu") else 0.1 for m in EVERY})
             for cpu in (5, 20, 21, 50, 64)}
    load = state(crane_policy(), nodes)
    names = sorted(nodes)
    crane = dict(zip(names, crane_scores(load, names)))
    extender = dict(zip(names, decision.prioritize({"name": "web"}, names, None, load)))
    assert crane == {"n5": 92, "n20": 85, "n21": 84, "n50": 70, "n64": 63}
    assert extender == {"n5": 9, "n20": 9, "n21": 8, "n50": 7, "n64": 6}
    for a in names:
        for b in names:
            if crane[a] > crane[b]:
                assert extender[a] >= extender[b]


# ---------------------------------------------------------------- hot value

HOT_CASES = [
    # annotator/node.go: value += bindings(window) / count (integer division), per hotValue rule.
    ("one pod in the last minute costs nothing", [10], 0),
    ("two pods in the last minute cost a point (2 / 2)", [10, 20], 1),
    ("three pods cost a point (3 / 2)", [10, 20, 30], 1),
    ("four pods cost two points (4 / 2)", [10, 20, 30, 40], 2),
    ("five pods: 5 / 2 + 5 / 5 = 3 points", [10, 20, 30, 40, 50], 3),
    ("five pods in 5 minutes, none in the last: 5 / 5 = 1", [100, 120, 150, 200, 250], 1),
    ("ten pods in 5 minutes, none in the last: 10 / 5 = 2", [100 + 10 * i for i in range(10)], 2),
    # binding.go: Timestamp > now - timeRange, so a pod exactly one window ago no longer counts.
    ("a pod exactly 60 s ago is outside the minute", [60, 10], 0),
    ("a pod 59 s ago is inside the minute", [59, 10], 1),
    ("pods exactly 5 minutes ago are outside", [300] * 5, 0),
]


@pytest.mark.parametrize("ages, points", [c[1:] for c in HOT_CASES], ids=[c[0] for c in HOT_CASES])
def test_a_policy_file_gets_cranes_hot_value(ages, points):
    load = state(crane_policy(), {"n": {}}, {"n": ages})
    assert load.hot_value("n") == points


@pytest.mark.parametrize("ages, points", [
    ([10, 20], 0),  # the seed: "more than 2 pods in the last minute"
    ([10, 20, 30], 1),
    ([10, 20, 30, 40], 1),  # still one point for the minute rule
    ([10, 20, 30, 40, 50, 60.5], 2),  # 3 in the minute, 6 in 5 minutes: one point each
], ids=["two pods", "three pods", "four pods", "six pods"])
def test_without_a_policy_file_the_seeds_hot_rules_apply(ages, points):
    assert state(DEFAULT_POLICY, {"n": {}}, {"n": ages}).hot_value("n") == points


def test_each_hot_point_costs_10_and_the_score_clamps_at_0():
    # plugins.go Score: score - int(hotValue * 10), NormalizeScore to 0..100.
    idle = node(**{m: 0.0 for m in EVERY})
    assert score(crane_policy(), idle, [10, 20]) == 90
    assert score(crane_policy(), idle, [10, 20, 30, 40, 50]) == 70
    busy = node(**{m: 0.8 for m in EVERY})
    assert score(crane_policy(), busy, [10, 20, 30, 40]) == 0  # 20 - 20


def test_without_a_hot_value_section_bindings_cost_nothing():
    load = state(crane_policy(hotValue=None), {"n": node(**{m: 0.0 for m in EVERY})}, {"n": [1] * 20})
    assert load.hot_value("n") == 0 and crane_scores(load, ["n"]) == [100]


# ---------------------------------------------------------------- the policy document

def test_a_left_out_section_is_empty():
    policy = crane_policy(predicate=None, priority=None, hotValue=None)
    assert (policy.limits, policy.weights, policy.hot) == ({}, {}, [])
    assert crane_policy(syncPolicy=None).sync == {}


def test_a_0_limit_is_accepted():
    policy = crane_policy(predicate=[{"name": "cpu_usage_avg_5m", "maxLimitPecent": 0}])
    assert policy.limits == {"cpu_usage_avg_5m": 0}


REFUSED = [
    # Ours, each because crane fails at run time or the value can only be a mistake:
    ("a 0 period: crane's annotator panics (time.NewTicker)", {"syncPolicy": [{"name": "a", "period": "0s"}]},
     "spec.syncPolicy[0].period"),
    ("a 0 count: crane's annotator divides by it", {"hotValue": [{"timeRange": "1m", "count": 0}]},
     "spec.hotValue[0].count"),
    ("a negative limit would filter every node with data", {"predicate": [{"name": "a", "maxLimitPecent": -1}]},
     "spec.predicate[0].maxLimitPecent"),
    ("a negative weight", {"priority": [{"name": "a", "weight": -1}]}, "spec.priority[0].weight"),
    ("a duplicated priority: crane would count it twice", {"priority": [PRIORITY[0], PRIORITY[0]]},
     "spec.priority[1].name"),
    # metav1.Duration unmarshals only a string: a bare number is an error in crane too.
    ("a period without a unit", {"syncPolicy": [{"name": "a", "period": 180}]}, "spec.syncPolicy[0].period"),
]


@pytest.mark.parametrize("spec, field", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_what_crane_cannot_run_is_refused_naming_the_field(spec, field):
    with pytest.raises(PolicyError) as error:
        crane_policy(**spec)
    assert error.value.field == field and error.value.reason


WARNED = [
    ("a 0 limit", {"predicate": [{"name": "cpu_usage_avg_5m", "maxLimitPecent": 0}]}, "spec.predicate[0]"),
    ("a limit above 1", {"predicate": [{"name": "cpu_usage_avg_5m", "maxLimitPecent": 65}]}, "a fraction"),
    ("a predicate not synced", {"syncPolicy": SYNC[1:]}, "spec.predicate[0]: cpu_usage_avg_5m is not in"),
    ("a priority not synced", {"syncPolicy": SYNC[1:], "predicate": PREDICATE[1:]},
     "spec.priority[0]: cpu_usage_avg_5m is not in"),
    ("weights all 0", {"priority": [{**p, "weight": 0} for p in PRIORITY]}, "divides 0 by 0"),
    ("no priority", {"priority": None}, "every node scores 0"),
    ("no syncPolicy", {"syncPolicy": None}, "spec.syncPolicy: empty"),
]


@pytest.mark.parametrize("spec, text", [c[1:] for c in WARNED], ids=[c[0] for c in WARNED])
def test_a_policy_that_differs_from_expectation_or_from_crane_is_warned_about(spec, text):
    assert any(text in warning for warning in policy_warnings(crane_policy(**spec)))
