"""The load-aware mode through the app: load filter after the policy's, scores combined, hotspots."""

from __future__ import annotations

import datetime

import pytest

from tas_extender.api import create_app
from tas_extender.load.annotations import format_value
from tas_extender.load.mode import LoadAware
from tas_extender.load.policy import DEFAULT_POLICY
from tas_extender.telemetry import Telemetry

from conftest import AsgiClient

NOW = 1_800_000_000.0
NODES = ["node-1", "node-2", "node-3"]


def annotations_for(cpu_percent: dict[str, float], age: float = 0.0) -> dict[str, dict[str, str]]:
    """Every policy metric of each node at that CPU percentage (memory at 10 %)."""
    stamp = datetime.datetime.fromtimestamp(NOW - age, datetime.timezone.utc)
    return {node: {metric: format_value(cpu if metric.startswith("cpu") else 10.0, stamp)
                   for metric in DEFAULT_POLICY.sync} for node, cpu in cpu_percent.items()}


@pytest.fixture
def mode() -> LoadAware:
    table = annotations_for({"node-1": 90.0, "node-2": 40.0, "node-3": 10.0})
    return LoadAware(DEFAULT_POLICY, table.get, clock=lambda: NOW)


@pytest.fixture
def load_client(engine, mode) -> AsgiClient:
    return AsgiClient(create_app(engine, Telemetry(), max_body_bytes=1 << 20, readiness=lambda: [], load=mode))


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
    client = AsgiClient(create_app(engine, Telemetry(), 1 << 20, lambda: [],
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
    mode.on_pod("old", "node-3", initial=True)
    mode.on_pod("old", "node-3")
    mode.on_pod("new", "node-3")
    assert mode.bindings.count("node-3", 60, NOW) == 1


class FakeSource:
    """Prometheus answering from a table: metric -> node -> percent (this is a test double)."""

    name = "table"

    def __init__(self, table: dict[str, dict[str, float]]):
        self.table, self.asked = table, []

    def fetch(self, metrics: set[str]):
        from tas_extender.metrics import Sample

        self.asked.append(sorted(metrics))
        return {m: {n: Sample(v, NOW) for n, v in self.table.get(m, {}).items()} for m in metrics}


def test_the_annotator_writes_each_metric_on_its_own_period_and_lists_what_it_wrote():
    from tas_extender.load.annotations import parse_value
    from tas_extender.load.annotator import MANAGED_KEY, Annotator

    clock = [NOW]
    source = FakeSource({"cpu_usage_avg_5m": {"node-1": 42.5}, "mem_usage_avg_5m": {"node-1": 200.0}})
    patches = []
    annotator = Annotator(DEFAULT_POLICY, source, lambda: {"node-1": {}, "node-2": {}},
                          lambda node, body: patches.append((node, body)), clock=lambda: clock[0])
    assert annotator.sync() == 1  # node-2 has no values: no patch
    node, body = patches[0]
    written = body["metadata"]["annotations"]
    assert node == "node-1" and parse_value(written["cpu_usage_avg_5m"])[0] == 42.5
    assert parse_value(written["cpu_usage_avg_5m"])[1].timestamp() == NOW
    assert "mem_usage_avg_5m" not in written, "a value above 100 % is garbage, not load"
    assert written[MANAGED_KEY].split(",") == sorted(DEFAULT_POLICY.sync)
    assert len(source.asked[0]) == len(DEFAULT_POLICY.sync)

    clock[0] = NOW + 180  # the avg_5m metrics (3 min) are due again, the 1 h and 1 d ones are not
    annotator.sync()
    assert source.asked[1] == ["cpu_usage_avg_5m", "mem_usage_avg_5m"]


def test_turning_the_mode_off_removes_exactly_the_annotations_it_wrote():
    from tas_extender.load.annotator import MANAGED_KEY, cleanup_patches

    nodes = {"node-1": {MANAGED_KEY: "cpu_usage_avg_5m", "cpu_usage_avg_5m": "1,x", "other": "kept"},
             "node-2": {"other": "kept"}}
    assert cleanup_patches(nodes) == {
        "node-1": {"metadata": {"annotations": {"cpu_usage_avg_5m": None, MANAGED_KEY: None}}}}
