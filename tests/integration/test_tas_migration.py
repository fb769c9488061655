"""Coming from TAS: its own example policies, applied unchanged to the local cluster's API server.

The files under tests/fixtures/policies/tas/ are copied verbatim from TAS's repository (each
names its source). They go in with the kubernetes client exactly as written, namespaces
included, and must be accepted (status) and obeyed: node labels for deschedule and labeling,
the extender's filter and scores for pods of each policy.
"""

from __future__ import annotations

import pathlib
import uuid

import httpx
import pytest
import yaml
from kubernetes import client
from support import wait_for
from support.controller import DEADLINE, GROUP, NODES, PLURAL, VERSION, node_labels

TAS_POLICIES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "policies" / "tas"

# What each node reports, chosen so that every policy has a node on each side of its targets.
METRICS = {
    "node-1": {"health_metric": 0, "node_metric": 150, "temperature": 90, "freeRAM": 100,
               "package_power_avg": 30, "metric_card0": 200, "metric_card1": 90},
    "node-2": {"health_metric": 2, "node_metric": 5, "temperature": 90, "freeRAM": 500,
               "package_power_avg": 70, "metric_card0": 50, "metric_card1": 250},
    # package_power_avg equal to its target (GreaterThan 60: not broken); no metric_card1 at all.
    "node-3": {"health_metric": 1, "node_metric": -1, "temperature": 20, "freeRAM": 1000,
               "package_power_avg": 60, "metric_card0": 100},
}

# What TAS does with those values (its README, docs/health-metric-example.md,
# docs/strategy-labeling-example.md, docs/power/README.md).
WANT_LABELS = {
    "node-1": {"multirules-policy": "violating",  # allOf: temperature > 80 and freeRAM < 200
               "telemetry.aware.scheduling.scheduling-policy/label1": "foo",  # node_metric > 100
               "telemetry.aware.scheduling.scheduling-policy/label2": "bar",
               "telemetry.aware.scheduling.labeling-policy/card0": "true"},  # metric_card0 > 100
    "node-2": {"demo-policy": "violating",  # health_metric == 2
               "telemetry.aware.scheduling.labeling-policy/card1": "true"},  # metric_card1 > 200
    "node-3": {"scheduling-policy": "violating"},  # node_metric == -1
}
WANT_FILTERED = {
    "health-metric-demo/demo-policy": ["node-2", "node-3"],  # health_metric 1 or 2
    "health-metric-demo/scheduling-policy": ["node-2", "node-3"],  # node_metric < 10
    "health-metric-demo/multirules-policy": ["node-1", "node-2"],  # anyOf: temperature > 80 or freeRAM < 200
    "power-demo/power-sensitive-scheduling-policy": ["node-2"],  # package_power_avg > 60
    "labeling-demo/labeling-policy": [],  # no dontschedule strategy
}
WANT_VIOLATING = {"health-metric-demo/demo-policy": ["node-2"], "health-metric-demo/scheduling-policy": ["node-3"],
                  "health-metric-demo/multirules-policy": ["node-1"],
                  "power-demo/power-sensitive-scheduling-policy": [], "labeling-demo/labeling-policy": []}


def _metrics_text() -> str:
    return "".join(f'{metric}{{node="{node}"}} {value}\n'
                   for node, values in METRICS.items() for metric, value in values.items())


@pytest.fixture
def tas_policies(api_client, crd):
    """TAS's example policies created unchanged; removed afterwards, with the namespaces made for them."""
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    docs = [yaml.safe_load(path.read_text()) for path in sorted(TAS_POLICIES.glob("*.yaml"))]
    existing = {ns.metadata.name for ns in core.list_namespace().items}
    made = sorted({doc["metadata"]["namespace"] for doc in docs} - existing)
    for name in made:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    created = []
    try:
        for doc in docs:
            meta = doc["metadata"]
            try:
                custom.create_namespaced_custom_object(GROUP, VERSION, meta["namespace"], PLURAL, doc)
            except client.ApiException as error:
                if error.status == 409:
                    pytest.fail(f"TASPolicy {meta['namespace']}/{meta['name']} exists already: these tests need "
                                "the bare cluster (make cluster-down integration)")
                raise
            created.append(meta)
        yield {f"{m['namespace']}/{m['name']}": m for m in created}
    finally:
        for meta in created:
            custom.delete_namespaced_custom_object(GROUP, VERSION, meta["namespace"], PLURAL, meta["name"])
        for name in made:
            core.delete_namespace(name)


def _filtered(port: int, namespace: str, name: str) -> list[str]:
    answer = httpx.post(f"http://127.0.0.1:{port}/scheduler/filter", timeout=5, json={
        "Pod": {"metadata": {"name": "p", "namespace": namespace, "labels": {"telemetry-policy": name}}},
        "NodeNames": NODES}).json()
    assert answer["Error"] == "", answer
    return sorted(answer["FailedNodes"])


def _scores(port: int, namespace: str, name: str) -> dict[str, int]:
    answer = httpx.post(f"http://127.0.0.1:{port}/scheduler/prioritize", timeout=5, json={
        "Pod": {"metadata": {"name": "p", "namespace": namespace, "labels": {"telemetry-policy": name}}},
        "NodeNames": NODES}).json()
    return {entry["Host"]: entry["Score"] for entry in answer}


def test_tas_example_policies_are_accepted_and_obeyed_unchanged(api_client, extender, tas_policies):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    extender.path.write_text(_metrics_text())

    def ours() -> dict[str, dict[str, str]]:
        keys = {k for labels in WANT_LABELS.values() for k in labels}
        return {node: {k: v for k, v in labels.items() if k in keys} for node, labels in node_labels(core).items()}

    wait_for(lambda: ours() == WANT_LABELS, DEADLINE, f"the labels TAS would set: {WANT_LABELS}")

    def status_of(key: str, meta: dict) -> dict | None:
        status = custom.get_namespaced_custom_object(GROUP, VERSION, meta["namespace"], PLURAL, meta["name"]).get("status")
        return status if status and status.get("violatingNodes") == WANT_VIOLATING[key] else None

    for key, meta in tas_policies.items():
        status = wait_for(lambda: status_of(key, meta), DEADLINE, f"status of {key}")  # noqa: B023 - called at once
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        assert conditions["Valid"] == "True" and "Warning" not in conditions, (key, status)

    port = extender.port
    filtered = wait_for(lambda: (f := {key: _filtered(port, m["namespace"], m["name"])
                                       for key, m in tas_policies.items()}) == WANT_FILTERED and f,
                        DEADLINE, f"the filter decisions TAS would make: {WANT_FILTERED}")
    assert filtered == WANT_FILTERED
    # scheduleonmetric LessThan: TAS ranks the lowest value first; the scores keep that order.
    health = _scores(port, "health-metric-demo", "demo-policy")
    power = _scores(port, "power-demo", "power-sensitive-scheduling-policy")
    assert health["node-1"] > health["node-3"] > health["node-2"], health
    assert power["node-1"] > power["node-3"] > power["node-2"], power


def test_a_policy_tas_accepts_with_rules_that_never_act_is_kept_reported_and_obeyed(api_client, extender,
                                                                                   namespace):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    name = f"compat-{uuid.uuid4().hex[:6]}"
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TASPolicy", "metadata": {"name": name, "namespace": namespace},
        "spec": {"strategies": {
            "dontschedule": {"rules": [{"metricname": "cpu-x", "operator": "GreaterThan", "target": 0},
                                       {"metricname": "", "operator": "GreaterThan", "target": 0},
                                       {"metricname": "health_metric", "operator": "Equals", "target": 1}]},
            "labeling": {"rules": [{"metricname": "health_metric", "operator": "GreaterThan", "target": 0},
                                   {"metricname": "health_metric", "operator": "Equals", "target": 2,
                                    "labels": ["health=bad", "bad key=x"]}]}}}})
    extender.set({"node-1": 0, "node-2": 2, "node-3": 1})

    status = wait_for(lambda: (s := custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
                               .get("status")) and len(s.get("conditions") or []) == 3 and s,
                      DEADLINE, "status with a Warning condition")
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Valid"]["status"] == "True" and conditions["Warning"]["status"] == "True"
    assert "dontschedule rule 1 (<empty metric name> GreaterThan 0)" in conditions["Warning"]["message"]
    events = wait_for(lambda: (e := {ev.reason: ev.message for ev in core.list_namespaced_event(namespace).items
                                     if ev.involved_object.name == name and ev.type == "Warning"})
                      and len(e) == 3 and e, DEADLINE, "one Warning event per kind of never-acting rule")
    assert set(events) == {"EmptyMetricName", "NoLabels", "InvalidLabel"}
    assert "labeling rule 0 (health_metric GreaterThan 0) has no labels" in events["NoLabels"]
    assert "label key 'bad key' is not a valid label name" in events["InvalidLabel"]

    # The rest of the policy decides: health 1 is filtered, health 2 gets the valid label.
    wait_for(lambda: node_labels(core)["node-2"].get(f"telemetry.aware.scheduling.{name}/health") == "bad",
             DEADLINE, "node-2 labelled health=bad")
    assert wait_for(lambda: _filtered(extender.port, namespace, name) == ["node-3"], DEADLINE, "node-3 filtered")
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    wait_for(lambda: not any(k.startswith(f"telemetry.aware.scheduling.{name}/")
                             for labels in node_labels(core).values() for k in labels), DEADLINE, "labels removed")
