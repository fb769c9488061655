"""Intel TAS's own decisions, case by case: a TASPolicy written for TAS is decided here as TAS decides.

The cases come from TAS's code, tests and docs (intel/platform-aware-scheduling, paths below are
under telemetry-aware-scheduling/); each table says which file it follows. Where this project
decides differently on purpose, the case says so; docs/extender.md ("Coming from TAS") says why.
"""

from __future__ import annotations

import pathlib

import httpx
import pytest
import yaml
from tas_extender.cluster.reconcile import warning_condition
from tas_extender.decide.metrics import Sample, Snapshot
from tas_extender.decide.policy import PolicyError, parse_policy
from tas_extender.sources.prometheus import PrometheusSource
from tas_extender.decide.strategies import deschedule, dontschedule, labeling, scheduleonmetric

NOW = 1_000_000.0
TAS_POLICIES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "policies" / "tas"


def snap(values: dict[str, dict[str, float]]) -> Snapshot:
    return Snapshot.build({m: {n: Sample(v, NOW) for n, v in by.items()} for m, by in values.items()}, NOW, 60)


def policy(strategies: object, name: str = "p"):
    return parse_policy({"apiVersion": "telemetry.intel.com/v1alpha1", "kind": "TASPolicy",
                         "metadata": {"name": name, "namespace": "ns"}, "spec": {"strategies": strategies}})


def rule(metric: str, operator: str, target: int = 0, labels: list[str] | None = None) -> dict:
    out: dict = {"metricname": metric, "operator": operator, "target": target}
    if labels is not None:
        out["labels"] = labels
    return out


# --- what TAS accepts is accepted; what can never act is kept and reported -------------------

# deploy/tas-policy-crd.yaml: metricname matches ^[a-zA-Z0-9_-]+$ (its comment: the custom
# metrics API serves such names), labels are any strings, strategies is a map of any name to a
# strategy, rules has no minimum. TAS's code runs what the CRD lets through.
ACCEPTED = [
    ("metric name with dashes is accepted and needs no warning",
     {"dontschedule": {"rules": [rule("cpu-x", "GreaterThan", 90)]}}, []),
    ("metric name starting with a digit is accepted",
     {"dontschedule": {"rules": [rule("1m-load", "GreaterThan", 90)]}}, []),
    # types.go: TASPolicyStrategy.PolicyName, which the controller overwrites with the policy's name.
    ("policyName inside a strategy is accepted and ignored",
     {"deschedule": {"policyName": "other", "rules": [rule("health_metric", "Equals", 2)]}}, []),
    # labeling/strategy_test.go "No metric found" and telemetryscheduler.go getSchedulingRule
    # (a rule with len(Metricname) == 0) run rules with an empty metric name; CRDs before
    # July 2023 had no pattern.
    ("empty metric name is kept and reported",
     {"dontschedule": {"rules": [rule("", "GreaterThan", 9), rule("memory", "GreaterThan", 9)]}},
     [("spec.strategies.dontschedule.rules[0].metricname", "EmptyMetricName")]),
    # labeling/strategy_test.go "No labels found": the rule is violated, no label comes of it.
    ("labeling rule without labels is kept and reported",
     {"labeling": {"rules": [rule("memory", "GreaterThan", 9)]}},
     [("spec.strategies.labeling.rules[0].labels", "NoLabels")]),
    # labeling/enforce.go appendViolationPatchValue: a label that does not split into key and
    # value is an error at patch time, never at admission.
    ("label not of the form key=value is kept and reported",
     {"labeling": {"rules": [rule("memory", "GreaterThan", 9, ["card0", "card1=true"])]}},
     [("spec.strategies.labeling.rules[0].labels[0]", "InvalidLabel")]),
    ("label key Kubernetes refuses is kept and reported",
     {"labeling": {"rules": [rule("memory", "GreaterThan", 9, ["bad key=x"])]}},
     [("spec.strategies.labeling.rules[0].labels[0]", "InvalidLabel")]),
    # telemetryscheduler.go getDontScheduleStrategy: no rules, every node passes.
    ("strategy without rules is kept and reported",
     {"dontschedule": {"rules": []}, "deschedule": {"rules": [rule("health_metric", "Equals", 2)]}},
     [("spec.strategies.dontschedule.rules", "NoRules")]),
    # controller.go castStrategy: an unknown name is an error logged, never a refusal.
    ("unknown strategy is kept and reported",
     {"scheduleanyway": {"rules": [rule("health_metric", "Equals", 2)]},
      "dontschedule": {"rules": [rule("health_metric", "Equals", 1)]}},
     [("spec.strategies.scheduleanyway", "UnknownStrategy")]),
    ("policy without strategies is kept and reported", {}, [("spec.strategies", "NoStrategy")]),
    # labeling/enforce.go minMaxFilterViolatedRules: log.Panic on mixed operators for one key.
    ("one label key under different operators is kept and reported",
     {"labeling": {"rules": [rule("temperature", "GreaterThan", 80, ["heat=high"]),
                             rule("temperature", "LessThan", 10, ["heat=low"])]}},
     [("spec.strategies.labeling.rules[1].labels[0]", "MixedLabelOperators")]),
]


@pytest.mark.parametrize(("strategies", "warnings"), [c[1:] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_what_tas_accepts_is_accepted_and_what_never_acts_is_reported(strategies, warnings):
    accepted = policy(strategies)
    assert [(w.field, w.reason) for w in accepted.warnings] == warnings


def test_a_warning_names_policy_strategy_rule_metric_and_why():
    accepted = policy({"deschedule": {"logicalOperator": "allOf", "rules": [
        rule("temperature", "GreaterThan", 80), rule("", "LessThan", 200)]}}, name="multirules")
    (warning,) = accepted.warnings
    assert str(warning) == (
        "spec.strategies.deschedule.rules[1].metricname: policy multirules: deschedule rule 1 "
        "(<empty metric name> LessThan 200) has an empty metric name, which never has a value: "
        "with allOf the whole deschedule strategy is never violated")


def test_defaults_are_tas_defaults():
    # README.md: logicalOperator may be omitted, anyOf is the default; types.go: Target int64
    # (zero when omitted), as in scheduleonmetric rules that carry no target.
    accepted = policy({"scheduleonmetric": {"rules": [{"metricname": "freeRAM", "operator": "LessThan"}]}})
    strategy = accepted.strategy("scheduleonmetric")
    assert (strategy.logicalOperator, strategy.rules[0].target) == ("anyOf", 0)


@pytest.mark.parametrize("target", [-(2**63), 2**63 - 1], ids=["int64 minimum", "int64 maximum"])
def test_targets_span_int64_as_in_the_crd(target):
    assert policy({"dontschedule": {"rules": [rule("m", "Equals", target)]}}).strategy("dontschedule").rules[0].target == target


# deploy/tas-policy-crd.yaml refuses these as well: the API server never hands them to TAS.
REJECTED = [
    ("unknown operator", {"dontschedule": {"rules": [rule("m", "Above", 1)]}},
     "spec.strategies.dontschedule.rules[0].operator"),
    ("unknown logical operator", {"dontschedule": {"logicalOperator": "oneOf", "rules": [rule("m", "Equals")]}},
     "spec.strategies.dontschedule.logicalOperator"),
    ("metric name with a slash (a path segment of the custom metrics API)",
     {"dontschedule": {"rules": [rule("nodes/m", "Equals")]}}, "spec.strategies.dontschedule.rules[0].metricname"),
    ("metric name with a dot", {"dontschedule": {"rules": [rule("m.x", "Equals")]}},
     "spec.strategies.dontschedule.rules[0].metricname"),
    ("metric name with a space", {"dontschedule": {"rules": [rule("m x", "Equals")]}},
     "spec.strategies.dontschedule.rules[0].metricname"),
    ("fractional target", {"dontschedule": {"rules": [rule("m", "Equals", 0.5)]}},  # type: ignore[arg-type]
     "spec.strategies.dontschedule.rules[0].target"),
    ("target beyond int64", {"dontschedule": {"rules": [rule("m", "Equals", 2**63)]}},
     "spec.strategies.dontschedule.rules[0].target"),
    ("rule without operator", {"dontschedule": {"rules": [{"metricname": "m"}]}},
     "spec.strategies.dontschedule.rules[0].operator"),
    ("strategy without rules field", {"dontschedule": {"logicalOperator": "anyOf"}},
     "spec.strategies.dontschedule.rules"),
]


@pytest.mark.parametrize(("strategies", "field"), [c[1:] for c in REJECTED], ids=[c[0] for c in REJECTED])
def test_what_tas_crd_rejects_is_rejected_naming_the_field(strategies, field):
    with pytest.raises(PolicyError) as caught:
        policy(strategies)
    assert caught.value.field == field


@pytest.mark.parametrize("path", sorted(TAS_POLICIES.glob("*.yaml")), ids=lambda p: p.stem)
def test_tas_example_policies_load_unchanged_without_warnings(path):
    doc = yaml.safe_load(path.read_text())
    loaded = parse_policy(doc)
    assert (loaded.namespace, loaded.name, loaded.warnings) == (
        doc["metadata"]["namespace"], doc["metadata"]["name"], ())
    assert {kind: [(r.metricname, r.operator, r.target, r.labels) for r in loaded.strategy(kind).rules]
            for kind in doc["spec"]["strategies"]} == {
        kind: [(r["metricname"], r["operator"], r.get("target", 0), r.get("labels", [])) for r in body["rules"]]
        for kind, body in doc["spec"]["strategies"].items()}


# --- operators at the edges: core/operator.go EvaluateRule (Quantity.CmpInt64: <, >, ==) --------

EDGES = [
    ("LessThan", 10, 10, False), ("LessThan", 10, 9, True), ("LessThan", 10, 9.5, True), ("LessThan", 10, 11, False),
    ("GreaterThan", 60, 60, False), ("GreaterThan", 60, 61, True), ("GreaterThan", 60, 60.5, True),
    ("GreaterThan", 60, 59, False),
    ("Equals", 2, 2, True), ("Equals", 2, 1, False), ("Equals", 2, 3, False), ("Equals", 2, 2.5, False),
    ("Equals", -1, -1, True), ("LessThan", 0, -1, True), ("GreaterThan", -1, 0, True),
]


@pytest.mark.parametrize(("operator", "target", "value", "filtered"), EDGES,
                         ids=[f"{o} {t} value {v}" for o, t, v, _ in EDGES])
def test_operator_at_the_edges_of_the_target(operator, target, value, filtered):
    decided = dontschedule.failed_nodes(policy({"dontschedule": {"rules": [rule("m", operator, target)]}}),
                                        snap({"m": {"node-1": value}}), ["node-1"])
    assert ("node-1" in decided) is filtered


# --- dontschedule and deschedule: dontschedule/strategy_test.go, deschedule/strategy_test.go -----
# TestDontScheduleStrategy_Violated's cache: memory 10 and cpu 200 on node-1; "mem" and "cpu-x"
# have no value. deschedule/strategy.go Violated is the same loop, so the same table holds.

TAS_CACHE = {"memory": {"node-1": 10}, "cpu": {"node-1": 200}}
VIOLATED = [
    # (name, logicalOperator or None, rules, node-1 violates)
    ("one node violating", None, [("memory", "GreaterThan", 9)], True),
    ("no nodes violating", None, [("memory", "GreaterThan", 11)], False),
    ("no metric found", None, [("mem", "GreaterThan", 9)], False),
    ("one rule with allOf", "allOf", [("memory", "GreaterThan", 9)], True),
    ("no metric with allOf", "allOf", [("mem", "GreaterThan", 9)], False),
    ("the 1st rule broken, default operator", None, [("memory", "GreaterThan", 9), ("cpu", "GreaterThan", 900)], True),
    ("the 2nd rule broken with anyOf", "anyOf", [("memory", "GreaterThan", 90), ("cpu", "GreaterThan", 90)], True),
    ("the 1st broken and no metric for the 2nd, anyOf", "anyOf",
     [("memory", "GreaterThan", 9), ("cpu-x", "GreaterThan", 90)], True),
    ("no rule broken with anyOf", "anyOf", [("memory", "GreaterThan", 90), ("cpu", "GreaterThan", 900)], False),
    ("only the 1st broken with allOf", "allOf", [("memory", "GreaterThan", 9), ("cpu", "GreaterThan", 900)], False),
    ("only the 2nd broken with allOf", "allOf", [("memory", "GreaterThan", 90), ("cpu", "GreaterThan", 90)], False),
    ("both broken with allOf", "allOf", [("memory", "GreaterThan", 9), ("cpu", "GreaterThan", 90)], True),
    ("allOf with one rule missing its metric", "allOf",
     [("memory", "GreaterThan", 9), ("cpu-x", "GreaterThan", 90)], False),
    # An empty metric name is never in TAS's cache (ReadMetric fails): the rule is never broken.
    ("empty metric name beside a broken rule, anyOf", None, [("", "GreaterThan", 9), ("memory", "GreaterThan", 9)], True),
    ("empty metric name with allOf", "allOf", [("", "GreaterThan", 9), ("memory", "GreaterThan", 9)], False),
    # No rules: nodeMetricViol never counts up, so nothing is violated, with allOf too.
    ("no rules", None, [], False),
    ("no rules with allOf", "allOf", [], False),
]


def _strategy(operator: str | None, rules: list[tuple[str, str, int]]) -> dict:
    body: dict = {"rules": [rule(*r) for r in rules]}
    if operator is not None:
        body["logicalOperator"] = operator
    return body


@pytest.mark.parametrize(("operator", "rules", "violates"), [c[1:] for c in VIOLATED], ids=[c[0] for c in VIOLATED])
def test_dontschedule_filters_as_tas(operator, rules, violates):
    decided = dontschedule.failed_nodes(policy({"dontschedule": _strategy(operator, rules)}),
                                        snap(TAS_CACHE), ["node-1", "node-2"])
    assert sorted(decided) == (["node-1"] if violates else [])


@pytest.mark.parametrize(("operator", "rules", "violates"), [c[1:] for c in VIOLATED], ids=[c[0] for c in VIOLATED])
def test_deschedule_labels_violating_as_tas(operator, rules, violates):
    decided = deschedule.violating_nodes(policy({"deschedule": _strategy(operator, rules)}),
                                         snap(TAS_CACHE), ["node-1", "node-2"])
    assert decided == (["node-1"] if violates else [])


def test_failing_closed_never_counts_an_empty_metric_name_as_missing():
    # Ours: --missing-metrics fail-closed filters a node lacking a metric; a rule that can never
    # have a value is left out, or it would filter every node.
    p = policy({"dontschedule": {"rules": [rule("", "GreaterThan", 9), rule("memory", "GreaterThan", 90)]}})
    assert dontschedule.failed_nodes(p, snap(TAS_CACHE), ["node-1"], fail_closed=True) == {}


def test_the_health_demo_filters_and_deschedules_as_tas_docs_say():
    # docs/health-metric-example.md with deploy/health-metric-demo/health-policy.yaml: health 1
    # is not scheduled to, health 2 is descheduled too.
    demo = parse_policy(yaml.safe_load((TAS_POLICIES / "health-policy.yaml").read_text()))
    values = snap({"health_metric": {"node-1": 0, "node-2": 1, "node-3": 2}})
    nodes = ["node-1", "node-2", "node-3"]
    assert sorted(dontschedule.failed_nodes(demo, values, nodes)) == ["node-2", "node-3"]
    assert deschedule.violating_nodes(demo, values, nodes) == ["node-3"]
    assert deschedule.label_key(demo) == "demo-policy"


# --- labeling: labeling/strategy_test.go TestLabelingStrategy_Violated, README.md ----------------

PREFIX = "telemetry.aware.scheduling.p/"
LABELED = [
    ("one node violating", None, [rule("memory", "GreaterThan", 9, ["card0=false"])], {"card0": "false"}),
    ("no nodes violating", None, [rule("memory", "GreaterThan", 11, ["card0=false"])], None),
    ("no metric found (empty metric name)", None, [rule("", "GreaterThan", 9, ["card0=false"])], None),
    ("no labels found: violated, nothing to set", None, [rule("memory", "GreaterThan", 9, [])], None),
    ("no metric w/ allOf", "allOf", [rule("mem", "GreaterThan", 9, ["card0=false"])], None),
    ("the 2nd rule broken", None, [rule("memory", "GreaterThan", 90, ["card0=false"]),
                                   rule("cpu", "GreaterThan", 90, ["card1=true"])], {"card1": "true"}),
    ("both rules broken", "anyOf", [rule("memory", "GreaterThan", 9, ["card0=false"]),
                                    rule("cpu", "GreaterThan", 90, ["card1=true"])],
     {"card0": "false", "card1": "true"}),
    ("the 1st broken, no metric for the 2nd, anyOf", "anyOf",
     [rule("memory", "GreaterThan", 9, ["card0=false"]), rule("cpu-x", "GreaterThan", 90, ["card1=true"])],
     {"card0": "false"}),
    ("the 1st broken, no metric for the 2nd, allOf", "allOf",
     [rule("memory", "GreaterThan", 9, ["card0=false"]), rule("cpu-x", "GreaterThan", 90, ["card1=true"])], None),
    ("only the 1st broken with allOf", "allOf", [rule("memory", "GreaterThan", 9, ["card0=false"]),
                                                 rule("cpu", "GreaterThan", 900, ["card1=true"])], None),
    ("both broken with allOf", "allOf", [rule("memory", "GreaterThan", 9, ["card0=false"]),
                                         rule("cpu", "GreaterThan", 90, ["card1=true"])],
     {"card0": "false", "card1": "true"}),
    # A rule without labels still counts toward allOf (fetchRuleViolatingNodes collects it).
    ("a broken rule without labels completes allOf", "allOf",
     [rule("memory", "GreaterThan", 9, []), rule("cpu", "GreaterThan", 90, ["card1=true"])], {"card1": "true"}),
    # README.md: for one key, GreaterThan keeps the rule with the largest value, LessThan the smallest.
    ("same key, GreaterThan: the largest value wins", None,
     [rule("memory", "GreaterThan", 5, ["foo=1"]), rule("cpu", "GreaterThan", 5, ["foo=2"])], {"foo": "2"}),
    ("same key, LessThan: the smallest value wins", None,
     [rule("memory", "LessThan", 500, ["foo=1"]), rule("cpu", "LessThan", 500, ["foo=2"])], {"foo": "1"}),
    # shouldUpdateRuleThreshold is false for Equals: the first rule keeps the key.
    ("same key, Equals: the first rule wins", None,
     [rule("memory", "Equals", 10, ["foo=1"]), rule("cpu", "Equals", 200, ["foo=2"])], {"foo": "1"}),
    # Ours: a label Kubernetes refuses is skipped (TAS fails the whole enforce run on it).
    ("a label Kubernetes refuses is skipped, the rule's other labels set", None,
     [rule("memory", "GreaterThan", 9, ["card0", "card1=true"])], {"card1": "true"}),
]


@pytest.mark.parametrize(("operator", "rules", "labels"), [c[1:] for c in LABELED], ids=[c[0] for c in LABELED])
def test_labeling_sets_the_labels_tas_sets(operator, rules, labels):
    body: dict = {"rules": rules}
    if operator is not None:
        body["logicalOperator"] = operator
    decided = labeling.node_labels(policy({"labeling": body}), snap(TAS_CACHE), ["node-1", "node-2"])
    assert decided == ({"node-1": {PREFIX + k: v for k, v in labels.items()}} if labels else {})


def test_the_labeling_example_labels_the_card_whose_metric_is_above_target():
    # docs/strategy-labeling-example.md: node1 reports metric_card0 200, node2 metric_card1 90.
    example = parse_policy(yaml.safe_load((TAS_POLICIES / "labeling-policy.yaml").read_text()))
    decided = labeling.node_labels(example, snap({"metric_card0": {"node1": 200}, "metric_card1": {"node2": 90}}),
                                   ["node1", "node2"])
    assert decided == {"node1": {"telemetry.aware.scheduling.labeling-policy/card0": "true"}}


# --- scheduleonmetric: telemetryscheduler.go prioritizeNodesForRule, core/operator.go OrderedList -

def test_scores_keep_tas_order_for_one_rule_without_going_negative():
    # TAS: LessThan sorts ascending, GreaterThan descending, scores 10, 9, 8, ... by rank.
    # Ours (deliberate): 0..10 by where the value lies between best and worst; the order is TAS's.
    values = snap({"freeRAM": {f"n{i}": float(i) for i in range(12)}})
    nodes = [f"n{i}" for i in range(12)]
    low = scheduleonmetric.scores(policy({"scheduleonmetric": {"rules": [rule("freeRAM", "LessThan")]}}), values, nodes)
    high = scheduleonmetric.scores(policy({"scheduleonmetric": {"rules": [rule("freeRAM", "GreaterThan")]}}),
                                   values, nodes)
    assert sorted(nodes, key=low.__getitem__, reverse=True) == nodes
    assert sorted(nodes, key=high.__getitem__) == nodes
    assert min(low.values()) == 0 and max(low.values()) == 10


@pytest.mark.parametrize(
    ("rules", "values"),
    [([rule("", "LessThan")], {"freeRAM": {"a": 1, "b": 2}}),
     ([rule("cpu-x", "LessThan")], {"freeRAM": {"a": 1, "b": 2}}),
     ([], {"freeRAM": {"a": 1, "b": 2}})],
    ids=["empty metric name (getSchedulingRule: no rule)", "metric without values (ReadMetric fails)",
         "no rules (getSchedulingRule: no rule)"],
)
def test_scores_are_all_zero_when_tas_returns_no_priorities(rules, values):
    p = policy({"scheduleonmetric": {"rules": rules}})
    assert scheduleonmetric.scores(p, snap(values), ["a", "b"]) == {"a": 0, "b": 0}


def test_a_node_without_the_metric_scores_zero_as_when_tas_leaves_it_out():
    # prioritizeNodesForRule keeps only nodes with a value; the scheduler counts the rest as 0.
    p = policy({"scheduleonmetric": {"rules": [rule("freeRAM", "LessThan")]}})
    assert scheduleonmetric.scores(p, snap({"freeRAM": {"a": 1, "b": 2}}), ["a", "b", "c"])["c"] == 0


def test_an_empty_metric_name_is_left_out_of_the_scores_and_of_the_fetch():
    p = policy({"scheduleonmetric": {"rules": [rule("", "LessThan"), rule("freeRAM", "LessThan")]}})
    assert scheduleonmetric.scores(p, snap({"freeRAM": {"a": 1, "b": 2}}), ["a", "b"]) == {"a": 10, "b": 0}
    assert p.metric_names() == {"freeRAM"}


def test_every_scheduleonmetric_rule_counts_where_tas_reads_only_the_first():
    # Deliberate: getSchedulingRule returns Rules[0] only.
    p = policy({"scheduleonmetric": {"rules": [rule("freeRAM", "GreaterThan"), rule("temperature", "LessThan")]}})
    values = snap({"freeRAM": {"a": 100, "b": 50}, "temperature": {"a": 90, "b": 20}})
    assert scheduleonmetric.scores(p, values, ["a", "b"]) == {"a": 5, "b": 5}


# --- around the decisions ---------------------------------------------------------------------

def test_a_dashed_metric_name_reaches_prometheus_as_a_name_matcher():
    # PromQL would read node_cpu-x as a subtraction; the query must select the series by name.
    queries = []

    def answer(request: httpx.Request) -> httpx.Response:
        queries.append(request.url.params["query"])
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"node": "node-1"}, "value": [NOW, "7"]}]}})

    source = PrometheusSource("http://prometheus:9090", transport=httpx.MockTransport(answer))
    fetched = source.fetch({"cpu-x"})
    assert queries == ['max by (node) ({__name__="node_cpu-x",node!=""}) '
                       'or max by (instance) ({__name__="node_cpu-x",node=""})']
    assert fetched == {"cpu-x": {"node-1": Sample(7.0, NOW)}}


def test_the_warning_condition_names_the_rules_and_is_absent_without_warnings():
    clean = policy({"dontschedule": {"rules": [rule("health_metric", "Equals", 1)]}})
    assert warning_condition(clean) is None
    warned = policy({"labeling": {"rules": [rule(f"m{i}", "GreaterThan", 0) for i in range(7)]}})
    condition = warning_condition(warned)
    assert (condition["type"], condition["status"], condition["reason"]) == ("Warning", "True", "RulesNeverAct")
    assert "labeling rule 0 (m0 GreaterThan 0) has no labels" in condition["message"]
    assert condition["message"].endswith("and 2 more (see the policy's events)")
