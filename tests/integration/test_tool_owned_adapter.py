"""An adapter that Helm or Argo CD installed is not edited behind the tool's back.

`prometheus_adapter_deploy_mode: existing` adds our rule to the configuration of the adapter the
cluster runs. When that ConfigMap carries the marks of a deployment tool (Helm's release
annotations and label, Argo CD's tracking annotation), an edit would last until the tool's next
upgrade or sync, and scheduling would then ignore every policy. So the role stops before it
changes anything and prints the rules to put in the chart's values; removal leaves the tool's
objects as they are. The role runs on this machine against the KWOK cluster's API server; the
adapter's objects are made as the chart makes them (its pods are KWOK's, not run).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml
from kubernetes import client

from support import DEFAULT_CLUSTER_DIR, REPO, wait_for

BIN = pathlib.Path(sys.executable).parent
DEADLINE = 60
THEIR_RULES = "rules:\n- seriesQuery: 'http_requests_total'\n  resources: {overrides: {namespace: {resource: namespace}}}\n"
OWNERS = {
    "helm": ({"app.kubernetes.io/managed-by": "Helm"},
             {"meta.helm.sh/release-name": "platform-adapter", "meta.helm.sh/release-namespace": "{namespace}"},
             "managed by Helm (release platform-adapter)"),
    "argocd": ({}, {"argocd.argoproj.io/tracking-id": "platform:/ConfigMap:{namespace}/prometheus-adapter"},
               "managed by Argo CD"),
}


def run_role(tmp_path: pathlib.Path, namespace: str, **values) -> subprocess.CompletedProcess:
    """The prometheus_adapter role in existing mode on this machine, against the KWOK cluster."""
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable}, "roles": ["intel.tas.prometheus_adapter"]}]))
    settings = {"prometheus_adapter_deploy_mode": "existing", "prometheus_adapter_existing_namespace": namespace,
                **values}
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
           "K8S_AUTH_KUBECONFIG": str(DEFAULT_CLUSTER_DIR / "kubeconfig"),
           "KUBECONFIG": str(DEFAULT_CLUSTER_DIR / "kubeconfig")}
    return subprocess.run([BIN / "ansible-playbook", "-i", "localhost,", tmp_path / "play.yml",
                           "--extra-vars", json.dumps(settings)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def their_adapter(api_client, namespace: str, labels: dict, annotations: dict) -> None:
    """The ConfigMap and Deployment as a chart makes them, with the tool's marks."""
    marks = {"labels": labels, "annotations": {k: v.format(namespace=namespace) for k, v in annotations.items()}}
    client.CoreV1Api(api_client).create_namespaced_config_map(namespace, {
        "metadata": {"name": "prometheus-adapter", **marks}, "data": {"config.yaml": THEIR_RULES}})
    selector = {"app.kubernetes.io/name": "prometheus-adapter"}
    client.AppsV1Api(api_client).create_namespaced_deployment(namespace, {
        "metadata": {"name": "prometheus-adapter", **marks},
        "spec": {"replicas": 1, "selector": {"matchLabels": selector}, "template": {
            "metadata": {"labels": selector},
            "spec": {"containers": [{"name": "adapter",
                                     "image": "registry.k8s.io/prometheus-adapter/prometheus-adapter:v0.12.0"}]}}}})


def snapshot(api_client, namespace: str) -> dict:
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    config = core.read_namespaced_config_map("prometheus-adapter", namespace)
    deployment = apps.read_namespaced_deployment("prometheus-adapter", namespace)
    return {"configmap": (config.metadata.resource_version, config.data),
            # its spec and marks (its status is the deployment controller's to write)
            "deployment": (deployment.metadata.generation, deployment.metadata.labels, deployment.metadata.annotations,
                           api_client.sanitize_for_serialization(deployment.spec)),
            "pods": sorted(p.metadata.uid for p in core.list_namespaced_pod(namespace).items)}


@pytest.mark.parametrize("owner", sorted(OWNERS))
def test_a_tool_owned_adapter_is_left_alone_and_the_user_told_what_to_add_to_the_chart(
        api_client, namespace, tmp_path, owner):
    labels, annotations, says = OWNERS[owner]
    their_adapter(api_client, namespace, labels, annotations)
    apps = client.AppsV1Api(api_client)
    wait_for(lambda: (apps.read_namespaced_deployment("prometheus-adapter", namespace).status.ready_replicas or 0) == 1,
             DEADLINE, "their adapter's pod ready")
    before = snapshot(api_client, namespace)

    refused = run_role(tmp_path, namespace)
    output = refused.stdout + refused.stderr
    assert refused.returncode == 2, output[-4000:]
    assert "Stop when a deployment tool owns the adapter's configuration" in output
    flat = " ".join(output.split())
    for text in (f"The ConfigMap {namespace}/prometheus-adapter is {says}", "rules.custom",
                 "prometheus_adapter_existing_rules: false",
                 "rules: custom: - metricsQuery: max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
                 "name: matches: ^node_(.*)"):
        assert text in flat, f"{text!r} not in the output:\n{output[-4000:]}"
    assert snapshot(api_client, namespace) == before

    removed = run_role(tmp_path, namespace, tas_state="absent")
    assert removed.returncode == 0, (removed.stdout + removed.stderr)[-4000:]
    assert snapshot(api_client, namespace) == before
