"""Moving over from crane: nodes annotated by crane's annotator, crane's policy file, our extender.

The nodes of the local cluster are annotated by hand exactly as crane's node-annotator writes
(`<fraction, 5 decimals>,<time>Z`, crane run with TZ=UTC), the extender is started as users start
it with crane's shipped policy (deploy/manifests/dynamic/policy.yaml) and no annotator of its own,
and the scheduler's real requests (tests/fixtures/scheduler-requests, NodeNames) get crane's
answers. This cluster's kube-scheduler does not call the extender, so the answers are asserted.
"""

from __future__ import annotations

import copy
import datetime
import json
import pathlib

import httpx
import pytest
from kubernetes import client
from support import free_port, provisioned_extender, serving_extender, wait_for

NODES = ["node-1", "node-2", "node-3"]
DEADLINE = 30
FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
METRICS = ["cpu_usage_avg_5m", "cpu_usage_max_avg_1h", "cpu_usage_max_avg_1d",
           "mem_usage_avg_5m", "mem_usage_max_avg_1h", "mem_usage_max_avg_1d"]
CRANE_POLICY = (FIXTURES / "crane" / "policy.yaml").read_text()  # crane's shipped policy file


def crane_value(fraction: float, age: float = 0.0) -> str:
    """What crane's annotator writes: FormatFloat(percent / 100, 'f', 5) and the time, layout ...Z."""
    taken = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=age)
    return f"{fraction:.5f},{taken.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def crane_annotations() -> dict[str, dict[str, str]]:
    return {
        # crane reports node-1 90 % busy over 5 minutes: above 0.65, filtered.
        "node-1": {**{m: crane_value(0.9 if m.startswith("cpu") else 0.1) for m in METRICS}},
        # node-2 half busy, but its 5-minute memory value is 10 minutes old: stale, so it does not
        # filter and scores as no headroom: 50 * (2 - 0.2) / 2 = 45.
        "node-2": {**{m: crane_value(0.5) for m in METRICS}, "mem_usage_avg_5m": crane_value(0.99, age=600)},
        # node-3 20 % busy: (80 + 80) / 2 = 80.
        "node-3": {m: crane_value(0.2) for m in METRICS},
    }


@pytest.fixture
def annotated_nodes(api_client):
    """The nodes annotated as crane's annotator would; the annotations taken off afterwards."""
    core = client.CoreV1Api(api_client)
    for node, values in crane_annotations().items():
        core.patch_node(node, {"metadata": {"annotations": values}})
    yield core
    for node in NODES:
        core.patch_node(node, {"metadata": {"annotations": {m: None for m in METRICS}}})


@pytest.fixture
def extender(api_client, kubeconfig, annotated_nodes, tmp_path, namespace):
    holder = provisioned_extender(api_client)
    if holder:
        pytest.fail(f"the extender provisioned by site.yml ({holder}) runs here: use a bare cluster (make integration)")
    policy = tmp_path / "policy.yaml"
    policy.write_text(CRANE_POLICY)
    metrics = tmp_path / "metrics.prom"
    metrics.write_text("".join(f'health_metric{{node="{n}"}} 0\n' for n in NODES))
    port = free_port()
    args = ["--kubeconfig", kubeconfig, "--policy-file", str(FIXTURES / "policies" / "demo-policy.yaml"),
            "--metrics-file", str(metrics), "--syncPeriod", "1s", "--lease-namespace", namespace,
            "--load-aware", "--load-policy", str(policy)]
    with serving_extender(args, port, tmp_path / "extender.log", DEADLINE) as base:
        yield base


def request(verb: str, plain_pod: bool) -> dict:
    """The scheduler's real NodeNames request; `plain_pod` takes the demo policy's label off."""
    body = json.loads((FIXTURES / "scheduler-requests" / f"{verb}-node-names-k8s1.36.json").read_text())
    if plain_pod:
        body["Pod"] = copy.deepcopy(body["Pod"])
        body["Pod"]["metadata"]["labels"].pop("telemetry-policy")
    return body


def ask(base: str, verb: str, plain_pod: bool = True):
    response = httpx.post(f"{base}/scheduler/{verb}", json=request(verb, plain_pod))
    assert response.status_code == 200, response.text
    return response.json()


def test_crane_annotated_nodes_get_cranes_decisions(extender, annotated_nodes, namespace):
    filtered = ask(extender, "filter")
    assert filtered["NodeNames"] == ["node-2", "node-3"]
    assert filtered["FailedNodes"] == {"node-1": "load: cpu_usage_avg_5m 0.9 above 0.65, "
                                                 "cpu_usage_max_avg_1h 0.9 above 0.75"}
    # crane's 0..100: node-1 50, node-2 45, node-3 80; on the extender's 0..10, half up.
    assert {s["Host"]: s["Score"] for s in ask(extender, "prioritize")} == {"node-1": 5, "node-2": 5, "node-3": 8}

    # A pod with the demo TASPolicy (every node healthy, so the policy scores all 10): the
    # policy filter first, then crane's; the scores are the mean of the two.
    demo = ask(extender, "filter", plain_pod=False)
    assert list(demo["FailedNodes"]) == ["node-1"]
    assert {s["Host"]: s["Score"] for s in ask(extender, "prioritize", plain_pod=False)} == {
        "node-1": 8, "node-2": 8, "node-3": 9}

    # Two pods bound to node-3 within a minute: crane's hot value 2 // 2 = 1 costs it 10 points.
    for i in range(2):
        annotated_nodes.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"landed-{i}"},
            "spec": {"nodeName": "node-3", "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}})
    wait_for(lambda: {s["Host"]: s["Score"] for s in ask(extender, "prioritize")}["node-3"] == 7,
             DEADLINE, "node-3 scored 70 (80 less one hot point)")
