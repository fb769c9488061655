"""`tas-extender explain`: each node's verdict and score as the server answers them, with the
metric values and ages (and in load mode the load and hot value) behind them."""

from __future__ import annotations

import datetime
import json
import pathlib
import subprocess
import sys

import pytest
import yaml

from tas_extender.decide import decision
from tas_extender.offline.explain import explain
from tas_extender.decide.load.annotations import format_value
from tas_extender.decide.load.decide import LoadState
from tas_extender.decide.load.policy import DEFAULT_POLICY
from tas_extender.decide.metrics import Sample, Snapshot
from tas_extender.decide.policy import parse_policy
from tas_extender.decide.strategies import dontschedule, scheduleonmetric

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"
DEMO = yaml.safe_load((FIXTURES / "policies" / "demo-policy.yaml").read_text())
NOW = 1_800_000_000.0
NODES = ["node-1", "node-2", "node-3", "node-4"]
POD = {"name": "web-0", "namespace": "health-metric-demo", "labels": {"telemetry-policy": "demo-policy"}}


def _samples(**ages: float) -> dict[str, dict[str, Sample]]:
    values = {"node-1": 0.0, "node-2": 1.0, "node-3": 2.0}
    return {"health_metric": {node: Sample(value, NOW - ages.get(node.replace("-", "_"), 3.0))
                              for node, value in values.items()}}


def test_each_node_is_answered_as_the_server_answers_it():
    policy = parse_policy(DEMO)
    answer = explain(POD, policy, _samples(), NODES, NOW, max_age=30.0)
    snapshot = Snapshot.build(_samples(), NOW, 30.0)
    failed = decision.filter_nodes(POD, NODES, dontschedule.failed_nodes(policy, snapshot, NODES), None)
    scores = decision.prioritize(POD, NODES, scheduleonmetric.score_list(policy, snapshot, NODES), None)
    assert {n: (a.passed, a.reason) for n, a in answer.nodes.items()} == {n: (n not in failed, failed.get(n, ""))
                                                                         for n in NODES}
    assert [answer.nodes[n].score for n in NODES] == scores
    assert answer.nodes["node-2"].reason == "demo-policy: dontschedule rule health_metric Equals 1 violated (value 1)"
    assert (answer.nodes["node-1"].passed, answer.nodes["node-1"].score) == (True, 10)


def test_each_deciding_metric_is_shown_with_its_value_and_age():
    answer = explain(POD, parse_policy(DEMO), _samples(node_1=12.0), NODES, NOW, max_age=30.0)
    reading = answer.nodes["node-1"].metrics["health_metric"]
    assert (reading.value, reading.age, reading.used) == (0.0, 12.0, True)
    missing = answer.nodes["node-4"].metrics["health_metric"]
    assert (missing.value, missing.age, missing.used) == (None, None, False)


def test_a_stale_value_is_shown_but_counts_as_missing():
    # node-2's 1 is too old: it no longer filters node-2 (missing metrics fail open).
    answer = explain(POD, parse_policy(DEMO), _samples(node_2=45.0), NODES, NOW, max_age=30.0)
    reading = answer.nodes["node-2"].metrics["health_metric"]
    assert (reading.value, reading.used) == (1.0, False)
    assert answer.nodes["node-2"].passed is True
    closed = explain(POD, parse_policy(DEMO), _samples(node_2=45.0), NODES, NOW, max_age=30.0, fail_closed=True)
    assert "health_metric missing or stale" in closed.nodes["node-2"].reason


@pytest.mark.parametrize(
    ("labels", "note"),
    [({}, "names no TASPolicy"),
     ({"telemetry-policy": "gone"}, "names TASPolicy health-metric-demo/gone, which does not exist")],
)
def test_a_pod_without_a_policy_passes_everywhere_and_says_why(labels, note):
    pod = {**POD, "labels": labels}
    missing = "health-metric-demo/gone" if labels else None
    answer = explain(pod, None, {}, NODES, NOW, max_age=30.0, missing_policy=missing)
    assert all(a.passed and a.score == 0 and not a.metrics for a in answer.nodes.values())
    assert note in answer.note


def test_in_load_mode_the_load_and_hot_value_are_shown_and_decide():
    read = datetime.datetime.fromtimestamp(NOW - 60, datetime.UTC)
    annotations = {"node-1": {"cpu_usage_avg_5m": format_value(0.9, read)},
                   "node-2": {"cpu_usage_avg_5m": format_value(0.1, read)}}
    bound = {"node-2": 3}
    load = LoadState(DEFAULT_POLICY, NOW, annotations.get, lambda node, window: bound.get(node, 0))
    answer = explain({"name": "p", "namespace": "default"}, None, {}, ["node-1", "node-2"], NOW, 30.0, load=load)
    busy, idle = answer.nodes["node-1"], answer.nodes["node-2"]
    assert busy.passed is False and "cpu_usage_avg_5m 0.9 above 0.65" in busy.reason
    assert busy.load == {"cpu_usage_avg_5m": 0.9} and idle.load == {"cpu_usage_avg_5m": 0.1}
    assert idle.hot_value == load.hot_value("node-2") > 0
    assert "load-aware" in answer.note


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tas_extender.cli", "explain", *args], capture_output=True, text=True)


@pytest.fixture
def pod_file(tmp_path):
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": POD}))
    return path


def test_offline_explain_prints_a_table_best_node_first(pod_file):
    result = run("--pod-file", str(pod_file), "--policy-file", str(FIXTURES / "policies" / "demo-policy.yaml"),
                 "--metrics-file", str(FIXTURES / "health.prom"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == ("pod health-metric-demo/web-0: TASPolicy health-metric-demo/demo-policy decides "
                        "(dontschedule filters, scheduleonmetric scores)")
    assert [line.split()[:3] for line in lines[2:]] == [
        ["node-1", "pass", "10"], ["node-2", "FAIL", "5"], ["node-3", "FAIL", "0"]]
    assert "health_metric=1 (0s old) (demo-policy: dontschedule rule health_metric Equals 1 violated" in lines[3]


def test_offline_explain_as_json(pod_file):
    result = run("--pod-file", str(pod_file), "--policy-file", str(FIXTURES / "policies" / "demo-policy.yaml"),
                 "--metrics-file", str(FIXTURES / "health.prom"), "-o", "json")
    document = json.loads(result.stdout)
    assert document["policy"] == "health-metric-demo/demo-policy"
    assert document["nodes"]["node-3"]["passed"] is False
    assert document["nodes"]["node-1"]["metrics"]["health_metric"] == {"value": 0.0, "age_seconds": 0.0, "used": True}


@pytest.mark.parametrize(
    ("args", "message"),
    [((), "give NAMESPACE/POD (from the cluster) or --pod-file (offline), one of them"),
     (("a/b", "--pod-file", "x.yaml"), "one of them")],
)
def test_explain_needs_exactly_one_pod(args, message):
    result = run(*args)
    assert result.returncode == 2 and message in result.stderr


def test_an_invalid_policy_file_is_refused_naming_the_field(tmp_path, pod_file):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: TASPolicy\nmetadata: {name: demo-policy, namespace: health-metric-demo}\n"
                   "spec: {strategies: {dontschedule: {rules: [{metricname: health_metric, operator: Above}]}}}\n")
    result = run("--pod-file", str(pod_file), "--policy-file", str(bad))
    assert result.returncode == 1
    assert "spec.strategies.dontschedule.rules[0].operator" in result.stderr
