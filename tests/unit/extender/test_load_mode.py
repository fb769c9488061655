"""The load-aware mode through the app: load filter after the policy's, scores combined, hotspots."""

from __future__ import annotations

import datetime

import pytest
from support.asgi import AsgiClient
from support.load_aware import NODES, NOW, annotations_for
from tas_extender.serve.api import create_app
from tas_extender.decide.load.mode import LoadAware
from tas_extender.decide.load.policy import DEFAULT_POLICY
from tas_extender.decide.telemetry import Telemetry


@pytest.fixture
def mode() -> LoadAware:
    table = annotations_for({"node-1": 90.0, "node-2": 40.0, "node-3": 10.0})
    return LoadAware(DEFAULT_POLICY, table.get, clock=lambda: NOW)


@pytest.fixture
def load_client(engine, mode) -> AsgiClient:
    return AsgiClient(create_app(engine, Telemetry(), max_body_bytes=1 << 20, readiness=list, load=mode))


def call(client: AsgiClient, verb: str, metadata: dict) -> object:
    response = client.post(f"/scheduler/{verb}", json={"Pod": {"metadata": metadata}, "NodeNames": NODES})
    assert response.status_code == 200, response.text
    return response.json()


PLAIN_POD = {"name": "web", "namespace": "default"}


def test_an_overloaded_node_is_filtered_with_metric_value_and_threshold(load_client):
    body = call(load_client, "filter", PLAIN_POD)
    assert body["NodeNames"] == ["node-2", "node-3"]
    assert body["FailedNodes"] == {"node-1": "load: cpu_usage_avg_5m 0.9 above 0.65, cpu_usage_max_avg_1h 0.9 above 0.75"}


def test_the_least_loaded_node_scores_highest(load_client):
    scores = {s["Host"]: s["Score"] for s in call(load_client, "prioritize", PLAIN_POD)}
    assert scores["node-3"] > scores["node-2"] > scores["node-1"]
    # cpu and memory weigh the same (0.2 + 0.3 + 0.5 each): (1 - cpu + 1 - mem) / 2, on 0..10.
    assert scores == {"node-1": 5, "node-2": 8, "node-3": 9}


def test_daemonset_pods_are_left_to_the_scheduler(load_client):
    pod = {**PLAIN_POD, "ownerReferences": [{"kind": "DaemonSet", "name": "agent"}]}
    assert call(load_client, "filter", pod)["FailedNodes"] == {}
    assert {s["Score"] for s in call(load_client, "prioritize", pod)} == {0}


def test_a_pod_with_a_policy_gets_the_policy_filter_first_then_the_load_filter(load_client):
    # The demo policy (tests/fixtures) filters node-2 on health_metric; load filters node-1.
    pod = {"name": "demo", "namespace": "health-metric-demo", "labels": {"telemetry-policy": "demo-policy"}}
    failed = call(load_client, "filter", pod)["FailedNodes"]
    assert failed["node-2"].startswith("demo-policy: dontschedule")
    assert failed["node-1"].startswith("load: ")


def test_stale_annotations_count_as_missing_and_fail_open(engine):
    stale = annotations_for({"node-1": 90.0, "node-2": 40.0, "node-3": 10.0}, age=max(DEFAULT_POLICY.sync.values()) + 301)
    client = AsgiClient(create_app(engine, Telemetry(), 1 << 20, list,
                                   load=LoadAware(DEFAULT_POLICY, stale.get, clock=lambda: NOW)))
    assert "node-1" not in call(client, "filter", PLAIN_POD)["FailedNodes"]


def test_a_burst_moves_to_the_next_node_once_the_first_is_hot(mode, load_client):
    # Close loads, so the hotspot penalty (10 points per binding over 2 a minute) decides.
    table = annotations_for({"node-1": 90.0, "node-2": 30.0, "node-3": 10.0})
    mode.annotations = table.get
    placed = []
    for i in range(8):
        scores = {s["Host"]: s["Score"] for s in call(load_client, "prioritize", PLAIN_POD)}
        best = max(sorted(scores), key=lambda n: scores[n])
        placed.append(best)
        mode.on_pod(f"uid-{i}", best)
    assert placed[:3] == ["node-3"] * 3
    assert "node-2" in placed, f"the burst piled onto one node: {placed}"


def test_pods_bound_before_the_watch_started_are_not_counted(mode):
    assert not mode.on_pod("old", "node-3", initial=True)
    assert not mode.on_pod("old", "node-3")
    assert mode.on_pod("new", "node-3")  # counted: the controller's tas_extender_load_bindings_total
    assert mode.bindings.count("node-3", 60, NOW) == 1


class FakeSource:
    """Prometheus answering from a table: metric -> node -> percent (this is a test double)."""

    name = "table"

    def __init__(self, table: dict[str, dict[str, float]]):
        self.table, self.asked = table, []

    def fetch(self, metrics: set[str]):
        from tas_extender.decide.metrics import Sample

        self.asked.append(sorted(metrics))
        return {m: {n: Sample(v, NOW) for n, v in self.table.get(m, {}).items()} for m in metrics}


def test_the_annotator_writes_cranes_format_on_each_metrics_own_period_and_lists_what_it_wrote():
    from tas_extender.cluster.annotator import MANAGED_KEY, Annotator

    clock = [NOW]
    source = FakeSource({"cpu_usage_avg_5m": {"node-1": 42.5, "node-2": float("nan")},
                         "mem_usage_avg_5m": {"node-1": 200.0, "node-2": -3.0}})
    patches = []
    annotator = Annotator(DEFAULT_POLICY, source, lambda: {"node-1": {}, "node-2": {}},
                          lambda node, body: patches.append((node, body)), clock=lambda: clock[0],
                          hot_value={"node-1": 2, "node-2": 0}.get)
    assert annotator.sync() == 1  # node-2 has only NaN and a negative value: no patch
    node, body = patches[0]
    written = body["metadata"]["annotations"]
    stamp = datetime.datetime.fromtimestamp(NOW, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    # crane's annotator queries `<metric> / 100` and writes it with five decimals (pkg/controller/prometheus).
    assert node == "node-1" and written["cpu_usage_avg_5m"] == f"0.42500,{stamp}"
    assert written["mem_usage_avg_5m"] == f"2.00000,{stamp}", "crane writes usage above 100 % as it is"
    # ... and the hot value beside the load (pkg/controller/annotator/node.go).
    assert written["node_hot_value"] == f"2,{stamp}"
    assert written[MANAGED_KEY].split(",") == [*sorted(DEFAULT_POLICY.sync), "node_hot_value"]
    assert len(source.asked[0]) == len(DEFAULT_POLICY.sync)

    # the 1 h and 1 d metrics have no series yet (rules not evaluated): asked again within seconds
    clock[0] = NOW + 10
    annotator.sync()
    assert source.asked[1] == sorted(set(DEFAULT_POLICY.sync) - {"cpu_usage_avg_5m", "mem_usage_avg_5m"})
    # ... and again while a node that has other load metrics lacks them (evaluated while its
    # exporter had one scrape): it would otherwise go without them for 1 h or 3 h
    source.table.update({m: {"node-1": 1.0} for m in DEFAULT_POLICY.sync if m not in source.table})
    clock[0] = NOW + 20
    annotator.sync()
    assert len(source.asked[2]) == 4
    clock[0] = NOW + 30
    annotator.sync()
    assert len(source.asked[3]) == 4
    for metric in source.asked[3]:
        source.table[metric]["node-2"] = 2.0
    clock[0] = NOW + 40
    annotator.sync()
    assert len(source.asked[4]) == 4 and len(source.asked) == 5

    clock[0] = NOW + 180  # the avg_5m metrics (3 min) are due again, the 1 h and 1 d ones are not
    annotator.sync()
    assert source.asked[5] == ["cpu_usage_avg_5m", "mem_usage_avg_5m"]


def test_a_node_that_never_had_a_load_series_is_not_waited_for():
    """A control plane nobody scrapes: the metrics the workers have are complete without it."""
    from tas_extender.cluster.annotator import Annotator

    clock = [NOW]
    source = FakeSource({m: {"node-1": 10.0} for m in DEFAULT_POLICY.sync})
    annotator = Annotator(DEFAULT_POLICY, source, lambda: {"node-1": {}, "control-plane": {}},
                          lambda node, body: None, clock=lambda: clock[0])
    annotator.sync()
    clock[0] = NOW + 60
    annotator.sync()
    assert len(source.asked) == 1


def test_turning_the_mode_off_removes_exactly_the_annotations_it_wrote():
    from tas_extender.cluster.annotator import MANAGED_KEY, cleanup_patches

    nodes = {"node-1": {MANAGED_KEY: "cpu_usage_avg_5m", "cpu_usage_avg_5m": "1,x", "other": "kept"},
             "node-2": {"other": "kept"}}
    assert cleanup_patches(nodes) == {
        "node-1": {"metadata": {"annotations": {"cpu_usage_avg_5m": None, MANAGED_KEY: None}}}}


def test_evaluate_answers_offline_what_the_app_answers(engine, tmp_path):
    """The same decision code behind both: crane's policy file, annotated nodes, a hot node."""
    import json
    import subprocess
    import sys

    import yaml
    from support import FIXTURES
    from tas_extender.decide.load.policy import load_policy_file

    policy_path = tmp_path / "policy.yaml"
    policy_path.write_text(yaml.safe_dump({
        "apiVersion": "scheduler.policy.crane.io/v1alpha1", "kind": "DynamicSchedulerPolicy",
        "spec": {"syncPolicy": [{"name": m, "period": "3m"} for m in DEFAULT_POLICY.sync],
                 "predicate": [{"name": "cpu_usage_avg_5m", "maxLimitPecent": 0.65}],
                 "priority": [{"name": m, "weight": w} for m, w in DEFAULT_POLICY.weights.items()],
                 "hotValue": [{"timeRange": "1m", "count": 2}]}}))
    table = annotations_for({"node-1": 90.0, "node-2": 40.0, "node-3": 30.0})
    nodes_path = tmp_path / "nodes.json"
    nodes_path.write_text(json.dumps({"kind": "NodeList", "items": [
        {"metadata": {"name": n, "annotations": a}} for n, a in table.items()]}))
    bindings_path = tmp_path / "bindings.yaml"
    bindings_path.write_text("node-3: [5, 10]\n")  # two pods in the last minute: one crane hot point

    mode = LoadAware(load_policy_file(policy_path), table.get, clock=lambda: NOW)
    mode.on_pod("a", "node-3")
    mode.on_pod("b", "node-3")
    app = AsgiClient(create_app(engine, Telemetry(), 1 << 20, list, load=mode, load_weight=2.0))
    demo = {"name": "demo", "namespace": "health-metric-demo", "labels": {"telemetry-policy": "demo-policy"}}

    stamp = datetime.datetime.fromtimestamp(NOW, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = subprocess.run(
        [sys.executable, "-m", "tas_extender.cli", "evaluate", "--policy-file",
         str(FIXTURES / "policies" / "demo-policy.yaml"), "--metrics-file", str(FIXTURES / "health.prom"),
         "--load-policy", str(policy_path), "--nodes", str(nodes_path), "--bindings", str(bindings_path),
         "--now", stamp, "--load-weight", "2"], check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    offline = json.loads(result.stdout)

    def answers(pod: dict) -> tuple[dict, dict]:
        failed = call(app, "filter", pod)["FailedNodes"]
        scores = {s["Host"]: s["Score"] for s in call(app, "prioritize", pod)}
        return {n: {"passed": n not in failed, "reason": failed.get(n, "")} for n in NODES}, scores

    load = offline["load"]
    assert (load["filter"], load["scores"]) == answers(PLAIN_POD)
    assert not load["filter"]["node-1"]["passed"]
    assert load["hot_values"] == {"node-1": 0, "node-2": 0, "node-3": 1}
    # node-3: (70 + 90) / 2 = 80, less 10 for its hot point; node-2: (60 + 90) / 2 = 75.
    assert load["crane_scores"] == {"node-1": 50, "node-2": 75, "node-3": 70}
    request = offline["policies"]["health-metric-demo/demo-policy"]["request"]
    assert (request["filter"], request["scores"]) == answers(demo)


# --- the load entry (load-filter, load-prioritize): every pod's load, the policy pods left to filter

DEMO_POD = {"name": "demo", "namespace": "health-metric-demo", "labels": {"telemetry-policy": "demo-policy"}}


def test_the_load_entry_filters_and_scores_a_pod_of_no_policy_as_filter_does(load_client):
    assert call(load_client, "load-filter", PLAIN_POD) == call(load_client, "filter", PLAIN_POD)
    assert call(load_client, "load-prioritize", PLAIN_POD) == call(load_client, "prioritize", PLAIN_POD)


def test_the_load_entry_passes_a_pod_of_a_policy_on_every_node_with_no_score(load_client):
    # The policy entry (filter, not ignorable) decides it, policy and load: node-2 by its policy, node-1 by load.
    failed = call(load_client, "filter", DEMO_POD)["FailedNodes"]
    assert failed["node-2"].startswith("demo-policy: ") and failed["node-1"].startswith("load: ")
    body = call(load_client, "load-filter", DEMO_POD)
    assert body["NodeNames"] == NODES and body["FailedNodes"] == {}
    assert {s["Score"] for s in call(load_client, "load-prioritize", DEMO_POD)} == {0}


def test_without_load_aware_mode_the_load_entry_passes_everything(client):
    body = call(client, "load-filter", PLAIN_POD)
    assert body["NodeNames"] == NODES and body["FailedNodes"] == {}
    assert [s["Score"] for s in call(client, "load-prioritize", PLAIN_POD)] == [0] * len(NODES)


def test_the_load_entry_refuses_what_filter_refuses_in_the_filter_result_shape(load_client):
    response = load_client.post("/scheduler/load-filter", content=b"{", headers={"content-type": "application/json"})
    assert response.status_code == 400 and "Error" in response.json() and "FailedNodes" in response.json()
    assert load_client.get("/scheduler/load-prioritize").status_code == 405
