"""Helpers of the integration tests of the TASPolicy controller against the local cluster's real
API server (tests/integration): the policies' API, the nodes, and the metrics file an extender
of the tests reads. The fixtures crd and extender that use them are in tests/integration/conftest.py."""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
from collections.abc import Iterator

import pytest
from kubernetes import client

from .cluster import provisioned_extender
from .extender import free_port, start_extender, wait_ready

GROUP, VERSION, PLURAL = "telemetry.intel.com", "v1alpha1", "taspolicies"
DEADLINE = 30
NODES = ["node-1", "node-2", "node-3"]


def refuse_a_provisioned_extender(api_client) -> None:
    """Two controllers would fight over the same labels: these tests need the bare cluster
    (`make integration` makes it bare first)."""
    holder = provisioned_extender(api_client)
    if holder:
        pytest.fail(f"the extender provisioned by site.yml ({holder}) is running and would relabel the "
                    "nodes these tests label: run them on a bare cluster (make integration brings one up)")


class Metrics:
    def __init__(self, path: pathlib.Path, port: int = 0):
        self.path = path
        self.port = port  # the extender's, which reads this file
        self.set({n: 0 for n in NODES})

    def set(self, values: dict[str, float], metric: str = "health_metric") -> None:
        self.path.write_text("".join(f'{metric}{{node="{n}"}} {v}\n' for n, v in values.items()))


def serve_args(kubeconfig: str, metrics: Metrics, namespace: str) -> list[str]:
    """What every extender of these tests serves with: the cluster, the metrics file, a 1 s sync."""
    return ["--kubeconfig", kubeconfig, "--metrics-file", str(metrics.path), "--syncPeriod", "1s",
            "--lease-namespace", namespace]


@contextlib.contextmanager
def extender_replicas(count: int, kubeconfig: str, metrics: Metrics, namespace: str,
                      logs: pathlib.Path) -> Iterator[list[tuple[subprocess.Popen, int]]]:
    """`count` extenders (process, port) serving the same cluster and Lease, each ready; killed after."""
    replicas = []
    try:
        for i in range(count):
            port = free_port()
            replicas.append((start_extender(serve_args(kubeconfig, metrics, namespace), port,
                                            logs / f"replica-{i}.log"), port))
        for _, port in replicas:
            wait_ready(port, DEADLINE, "replica ready")
        yield replicas
    finally:
        for proc, _ in replicas:
            proc.kill()
            proc.wait(10)


def node_labels(core: client.CoreV1Api) -> dict[str, dict[str, str]]:
    return {n: core.read_node(n).metadata.labels or {} for n in NODES}


def create_policy(custom, namespace: str, name: str, strategies: dict) -> dict:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TASPolicy",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"strategies": strategies}}
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


DESCHEDULE_AND_LABEL = {
    "deschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 2}]},
    "labeling": {"rules": [{"metricname": "health_metric", "operator": "GreaterThan", "target": 0,
                            "labels": ["health=bad"]}]},
}
