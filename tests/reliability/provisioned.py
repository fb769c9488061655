"""The provisioned stack (playbooks/site.yml on the local cluster) and helpers to drive it."""

from __future__ import annotations

import os
import pathlib
import re
import ssl
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import httpx
from kubernetes import client

from support import REPO, wait_for

GROUP, VERSION, PLURAL = "telemetry.intel.com", "v1alpha1", "taspolicies"
NODES = ["node-1", "node-2", "node-3"]
EXTENDER, PROMETHEUS, ADAPTER = "tas-extender", "prometheus-tas", "prometheus-adapter"
DEADLINE = 90
EXTENDER_NAMESPACE = "telemetry-aware-scheduling"


def _tool(name: str) -> str:
    """A command of the virtualenv the tests run in (supervisorctl, ansible-playbook)."""
    return str(pathlib.Path(sys.executable).with_name(name))


@dataclass(frozen=True)
class Stack:
    """Paths and names of the local cluster and what site.yml installed on it (inventory/)."""

    directory: pathlib.Path
    extender_url: str = "https://127.0.0.1:9001"

    def supervisorctl(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(
            [_tool("supervisorctl"), "-c", str(self.directory / "supervisord.conf"), *args],
            capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"supervisorctl {' '.join(args)}: {result.stdout}{result.stderr}")
        return result.stdout

    def pid(self, program: str) -> int:
        return int(self.supervisorctl("pid", program).strip())

    def running(self, program: str) -> bool:
        return " RUNNING " in self.supervisorctl("status", program, check=False)

    def tls(self) -> ssl.SSLContext:
        """What kube-scheduler presents to the extender: the client pair of the extender's CA."""
        pki = self.directory / "tas-pki"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "kube-scheduler" / "scheduler-client.crt"),
                                str(pki / "kube-scheduler" / "scheduler-client.key"))
        return context

    def log(self, program: str) -> pathlib.Path:
        return self.directory / "logs" / f"{program}.log"

    def set_health(self, values: dict[str, int]) -> None:
        """Write node_health_metric into each fake node's textfile, as intel.tas.set_health does."""
        for node, value in values.items():
            target = self.directory / "nodes" / node / "node-metrics" / "text.prom"
            temporary = target.with_suffix(".tmp")
            temporary.write_text(f"node_health_metric {value}\n")
            temporary.replace(target)


class Extender:
    """A client of the provisioned extender, speaking as kube-scheduler does."""

    def __init__(self, stack: Stack):
        self.stack = stack
        # A fresh connection per call: the server may restart between calls.
        self.timeout = 5.0  # the scheduler's httpTimeout (scheduler_config_http_timeout)

    def post(self, verb: str, namespace: str, policy: str, nodes: list[str] = NODES) -> httpx.Response:
        pod = {"metadata": {"name": "probe", "namespace": namespace, "labels": {"telemetry-policy": policy}}}
        with httpx.Client(verify=self.stack.tls(), timeout=self.timeout) as http:
            return http.post(f"{self.stack.extender_url}/scheduler/{verb}",
                             json={"Pod": pod, "Nodes": None, "NodeNames": nodes})

    def failed(self, namespace: str, policy: str) -> set[str]:
        response = self.post("filter", namespace, policy)
        assert response.status_code == 200, response.text
        return set(response.json()["FailedNodes"])

    def get(self, path: str) -> httpx.Response:
        with httpx.Client(verify=self.stack.tls(), timeout=self.timeout) as http:
            return http.get(self.stack.extender_url + path)

    def metric(self, name: str, labels: str = "") -> float | None:
        """A sample of the extender's /metrics, e.g. metric('tas_extender_metric_source_up')."""
        pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*{re.escape(labels)}[^}}]*\}})? (\S+)$", re.M)
        match = pattern.search(self.get("/metrics").text)
        return float(match.group(2)) if match else None


def create_policy(api_client, namespace: str, strategies: dict) -> str:
    name = f"policy-{uuid.uuid4().hex[:6]}"
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TASPolicy",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"strategies": strategies}})
    return name


def health_rule(strategy: str) -> dict:
    return {strategy: {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 1}]}}


def labelled(api_client, key: str) -> set[str]:
    """Nodes carrying the label `key`."""
    core = client.CoreV1Api(api_client)
    return {n for n in NODES if key in (core.read_node(n).metadata.labels or {})}


def run_pods(api_client, namespace: str, policy: str, replicas: int, name: str = "load") -> None:
    """A Deployment whose pods need the extender (telemetry/scheduling) and carry the policy."""
    body = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, "telemetry-policy": policy}},
                "spec": {"containers": [{
                    "name": "pause", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"telemetry/scheduling": "1"}}}]},
            },
        },
    }
    client.AppsV1Api(api_client).create_namespaced_deployment(namespace, body)


def scale(api_client, namespace: str, name: str, replicas: int) -> None:
    client.AppsV1Api(api_client).patch_namespaced_deployment_scale(
        name, namespace, {"spec": {"replicas": replicas}})


def bound_pods(api_client, namespace: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api_client).list_namespaced_pod(namespace).items
    return [p for p in pods if p.spec.node_name and not p.metadata.deletion_timestamp]


def wait_bound(api_client, namespace: str, count: int, timeout: float = DEADLINE) -> list[client.V1Pod]:
    return wait_for(lambda: (pods := bound_pods(api_client, namespace)) and len(pods) >= count and pods,
                    timeout, f"{count} pods bound in {namespace}")


def run_playbook(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([_tool("ansible-playbook"), *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}, check=False)


def wait_seconds_of(condition_holds, seconds: float, message: str) -> None:
    """Assert `condition_holds()` stays true for `seconds` (polled), not just once."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert condition_holds(), message
        time.sleep(0.5)


def extender_may(api_client, verb: str, group: str, resource: str, subresource: str, namespace: str,
                 name: str = "") -> bool:
    """Whether the extender's service account may: a SubjectAccessReview, the question
    `kubectl auth can-i --as` asks the API server."""
    account = f"system:serviceaccount:{EXTENDER_NAMESPACE}:tas-extender"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{EXTENDER_NAMESPACE}", "system:authenticated"]
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=account, groups=groups, resource_attributes=client.V1ResourceAttributes(
            verb=verb, group=group, resource=resource, subresource=subresource or None,
            namespace=namespace or None, name=name or None)))
    return client.AuthorizationV1Api(api_client).create_subject_access_review(review).status.allowed
