"""The extended resource on every node, against the local cluster's real API server: a node that
joins after the extender started is given it by the leader within seconds, a replica that does
not lead leaves it alone, and a value a node already has is kept.

The extender runs as users run it (`tas-extender serve --kubeconfig ...`, its defaults: the
resource `telemetry/scheduling=1000`). The nodes are Node objects the tests create and delete,
with a capacity and no kubelet (KWOK manages only nodes annotated for it).
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest
from kubernetes import client
from kubernetes.utils import parse_quantity

from support import free_port, start_extender, wait_for, wait_ready
from support.controller import DEADLINE, Metrics, serve_args

RESOURCE = "telemetry/scheduling"

# The fixtures kubeconfig, api_client and namespace come from tests/conftest.py; crd and extender
# from tests/integration/conftest.py.


@pytest.fixture
def make_node(api_client) -> Iterator[Callable[[dict[str, str]], str]]:
    """Create a node with the given capacity (a name of its own), deleted after the test."""
    core = client.CoreV1Api(api_client)
    made: list[str] = []

    def make(capacity: dict[str, str]) -> str:
        name = f"joined-{uuid.uuid4().hex[:6]}"
        core.create_node(client.V1Node(
            metadata=client.V1ObjectMeta(name=name, labels={"tas-test": "joined-later"}),
            status=client.V1NodeStatus(capacity=capacity, allocatable=capacity)))
        made.append(name)
        return name

    yield make
    for name in made:
        try:
            core.delete_node(name)
        except client.ApiException as error:
            if error.status != 404:
                raise


def capacity(core: client.CoreV1Api, node: str) -> dict[str, str]:
    return core.read_node(node).status.capacity or {}


BASE = {"cpu": "4", "memory": "8Gi", "pods": "110"}


def test_a_node_that_joins_later_is_given_the_resource_by_the_leader_and_a_value_it_has_is_kept(
        api_client, extender, make_node):
    core = client.CoreV1Api(api_client)
    kept = make_node({**BASE, RESOURCE: "7"})
    joined = make_node(BASE)
    reset = make_node({**BASE, RESOURCE: "0"})  # what a kubelet leaves on a re-created node

    given = wait_for(lambda: all(RESOURCE in capacity(core, n) and parse_quantity(capacity(core, n)[RESOURCE]) > 0
                                 for n in (joined, reset)) and capacity(core, joined),
                     DEADLINE, "the nodes that joined without the resource (or with 0 of it) given it")
    assert parse_quantity(given[RESOURCE]) == 1000
    assert {k: parse_quantity(v) for k, v in given.items() if k != RESOURCE} == \
        {k: parse_quantity(v) for k, v in BASE.items()}  # nothing else of the capacity touched
    assert parse_quantity(capacity(core, reset)[RESOURCE]) == 1000
    assert capacity(core, kept)[RESOURCE] == "7"  # rounds have run since it was created: it stays

    metrics = httpx.get(f"http://127.0.0.1:{extender.port}/metrics").text
    added = next(line for line in metrics.splitlines()
                 if line.startswith('tas_extender_node_capacity_patches_total{result="added"}'))
    assert float(added.split()[-1]) >= 2, added


def test_a_replica_that_does_not_lead_leaves_the_node_alone_until_it_leads(
        api_client, kubeconfig, crd, tmp_path, namespace, make_node):
    core, coordination = client.CoreV1Api(api_client), client.CoordinationV1Api(api_client)
    now = datetime.datetime.now(datetime.UTC)
    # Another replica holds the Lease, for an hour as this one counts it.
    coordination.create_namespaced_lease(namespace, client.V1Lease(
        metadata=client.V1ObjectMeta(name="tas-extender"),
        spec=client.V1LeaseSpec(holder_identity="another-replica", lease_duration_seconds=3600,
                                acquire_time=now, renew_time=now)))
    port = free_port()
    follower = start_extender(serve_args(kubeconfig, Metrics(tmp_path / "metrics.prom"), namespace), port,
                              tmp_path / "extender.log")
    try:
        wait_ready(port, DEADLINE)
        joined = make_node(BASE)
        rounds = 5  # seconds: five sync rounds of the follower (--syncPeriod 1s)
        deadline = time.monotonic() + rounds
        while time.monotonic() < deadline:
            assert RESOURCE not in capacity(core, joined)
            time.sleep(0.5)
        assert coordination.read_namespaced_lease("tas-extender", namespace).spec.holder_identity == "another-replica"

        coordination.delete_namespaced_lease("tas-extender", namespace)  # the other replica is gone
        wait_for(lambda: coordination.read_namespaced_lease("tas-extender", namespace).spec.holder_identity
                 .endswith(f"-{follower.pid}"), DEADLINE, "the follower leads")
        given = wait_for(lambda: capacity(core, joined).get(RESOURCE), DEADLINE, "the new leader gives the node it")
        assert parse_quantity(given) == 1000
    finally:
        follower.terminate()
        follower.wait(10)
