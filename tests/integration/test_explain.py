"""`tas-extender explain NAMESPACE/POD` against the local cluster's real API server: the pod,
its TASPolicy and the nodes read from the cluster, the metrics from a file the test writes."""

from __future__ import annotations

import json
import subprocess

from kubernetes import client

from support import tas_extender_command
from support.controller import NODES, create_policy

DEMO = {
    "dontschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 1},
                               {"metricname": "health_metric", "operator": "Equals", "target": 2}]},
    "scheduleonmetric": {"rules": [{"metricname": "health_metric", "operator": "LessThan", "target": 0}]},
}


def create_pod(core: client.CoreV1Api, namespace: str, name: str, labels: dict[str, str]) -> None:
    core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
        # Not scheduled: explain reads the pod, not where it runs.
        "spec": {"schedulerName": "nobody", "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}})


def explain(kubeconfig: str, target: str, metrics, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([tas_extender_command(), "explain", target, "--kubeconfig", kubeconfig,
                           "--metrics-source", "file", "--metrics-file", str(metrics), *extra],
                          capture_output=True, text=True, timeout=60)


def test_explain_reads_the_pod_and_its_policy_from_the_cluster(api_client, kubeconfig, crd, namespace, tmp_path):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    create_policy(custom, namespace, "demo", DEMO)
    create_pod(core, namespace, "web-0", {"telemetry-policy": "demo"})
    metrics = tmp_path / "metrics.prom"
    metrics.write_text('health_metric{node="node-1"} 0\nhealth_metric{node="node-2"} 1\n'
                       'health_metric{node="node-3"} 2\n')

    result = explain(kubeconfig, f"{namespace}/web-0", metrics, "-o", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["policy"] == f"{namespace}/demo"
    verdicts = {node: document["nodes"][node]["passed"] for node in NODES}
    assert verdicts == {"node-1": True, "node-2": False, "node-3": False}
    assert "dontschedule rule health_metric Equals 2 violated (value 2)" in document["nodes"]["node-3"]["reason"]
    assert document["nodes"]["node-1"]["score"] == 10
    assert document["nodes"]["node-2"]["metrics"]["health_metric"]["value"] == 1.0


def test_explain_says_when_the_pods_policy_does_not_exist(api_client, kubeconfig, crd, namespace, tmp_path):
    create_pod(client.CoreV1Api(api_client), namespace, "orphan", {"telemetry-policy": "gone"})
    metrics = tmp_path / "metrics.prom"
    metrics.write_text("")
    result = explain(kubeconfig, f"{namespace}/orphan", metrics)
    assert result.returncode == 0, result.stderr
    assert f"the pod names TASPolicy {namespace}/gone, which does not exist" in result.stdout.splitlines()[0]
    assert all(f"{node}  pass" in result.stdout for node in NODES)


def test_explain_of_a_pod_that_does_not_exist_names_it(kubeconfig, namespace, tmp_path):
    result = explain(kubeconfig, f"{namespace}/nothing", tmp_path / "none.prom")
    assert result.returncode == 1
    assert f"pod {namespace}/nothing: 404 Not Found" in result.stderr
