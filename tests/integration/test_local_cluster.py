"""The local cluster behaves like a real one: nodes Ready, pods Running, evictions replaced."""

from __future__ import annotations

from kubernetes import client
from kubernetes.utils import parse_quantity
from support import get_raw, wait_for


DEADLINE = 90


def fake_nodes(core: client.CoreV1Api) -> list[client.V1Node]:
    return core.list_node(label_selector="type=kwok").items


def is_ready(node: client.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def running_pods(core: client.CoreV1Api, namespace: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(namespace, label_selector="app=probe").items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def test_api_server_answers_readyz(api_client):
    assert get_raw(api_client, "/readyz") == b"ok"


def test_fake_nodes_are_ready_and_advertise_telemetry_scheduling(api_client):
    nodes = fake_nodes(client.CoreV1Api(api_client))
    assert len(nodes) >= 3
    for node in nodes:
        assert is_ready(node), f"{node.metadata.name} is not Ready"
        assert not [t for t in node.spec.taints or [] if t.effect == "NoSchedule"], node.spec.taints
        assert parse_quantity(node.status.allocatable["telemetry/scheduling"]) > 0


def test_deployment_pods_run_and_an_evicted_pod_is_replaced(api_client, namespace):
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    labels = {"app": "probe"}
    apps.create_namespaced_deployment(
        namespace,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name="probe"),
            spec=client.V1DeploymentSpec(
                replicas=2,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(
                        containers=[client.V1Container(name="app", image="registry.example/probe:1")]
                    ),
                ),
            ),
        ),
    )
    pods = wait_for(
        lambda: len(running_pods(core, namespace)) == 2 and running_pods(core, namespace),
        DEADLINE,
        "two probe pods Running",
    )
    fake = {n.metadata.name for n in fake_nodes(core)}
    assert {p.spec.node_name for p in pods} <= fake

    victim = pods[0].metadata.name
    core.create_namespaced_pod_eviction(
        victim,
        namespace,
        client.V1Eviction(metadata=client.V1ObjectMeta(name=victim, namespace=namespace)),
    )
    replaced = wait_for(
        lambda: (
            names := {p.metadata.name for p in running_pods(core, namespace)}
        ) and victim not in names and len(names) == 2 and names,
        DEADLINE,
        f"{victim} evicted and replaced by a new Running pod",
    )
    assert victim not in replaced
