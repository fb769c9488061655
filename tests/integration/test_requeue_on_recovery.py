"""The annotation that wakes kube-scheduler when a node passes again, against the local cluster's
real API server: the leader changes node-2's `telemetry.intel.com/recovered-at` when node-2's
metric goes back to allowed, and leaves every node's alone while nothing recovers or when turned
off (`--no-requeue-on-recovery`).

The extender runs as users run it (`tas-extender serve --kubeconfig ...`), with metrics from a
file the test writes. The policy's deschedule rule is the dontschedule rule's twin: its status
(`violatingNodes`) shows which metrics the leader's last round saw.
"""

from __future__ import annotations

import datetime
import time
import uuid

import httpx
from kubernetes import client
from support import free_port, serving_extender, wait_for
from support.controller import DEADLINE, GROUP, NODES, PLURAL, VERSION, Metrics, create_policy, serve_args

# The fixtures kubeconfig, api_client and namespace come from tests/conftest.py; crd and extender
# from tests/integration/conftest.py.

ANNOTATION = "telemetry.intel.com/recovered-at"
HEALTH_1_IS_BAD = {
    "dontschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 1}]},
    "deschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 1}]},
}
QUIET_ROUNDS = 4  # seconds: rounds of the extender (--syncPeriod 1s) in which nothing may be written


def recovered_at(core: client.CoreV1Api) -> dict[str, str | None]:
    return {n: (core.read_node(n).metadata.annotations or {}).get(ANNOTATION) for n in NODES}


def violating(custom: client.CustomObjectsApi, namespace: str, name: str) -> list[str] | None:
    status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name).get("status") or {}
    return status.get("violatingNodes")


def every_node_fails(custom, namespace: str, metrics: Metrics) -> str:
    """A policy that every node breaks, once the leader has had a round that saw it so."""
    name = f"requeue-{uuid.uuid4().hex[:6]}"
    metrics.set({n: 1 for n in NODES})
    create_policy(custom, namespace, name, HEALTH_1_IS_BAD)
    wait_for(lambda: violating(custom, namespace, name) == NODES, DEADLINE, "every node violating")
    return name


def hold_unchanged(core: client.CoreV1Api, before: dict[str, str | None], what: str) -> None:
    deadline = time.monotonic() + QUIET_ROUNDS
    while time.monotonic() < deadline:
        assert recovered_at(core) == before, what
        time.sleep(0.5)


def test_the_leader_changes_the_annotation_of_the_node_that_recovers_and_of_no_other(api_client, extender, namespace):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    name = every_node_fails(custom, namespace, extender)
    before = recovered_at(core)
    hold_unchanged(core, before, "an annotation changed while every node kept failing")

    recovered = datetime.datetime.now(datetime.UTC)
    extender.set({"node-1": 1, "node-2": 0, "node-3": 1})
    after = wait_for(lambda: (now := recovered_at(core))["node-2"] != before["node-2"] and now,
                     DEADLINE, lambda: f"node-2's {ANNOTATION} changed (it shows {recovered_at(core)})")
    assert {n: after[n] for n in ("node-1", "node-3")} == {n: before[n] for n in ("node-1", "node-3")}
    written = datetime.datetime.fromisoformat(after["node-2"].replace("Z", "+00:00"))
    assert written >= recovered - datetime.timedelta(seconds=1), (written, recovered)  # this recovery's
    assert violating(custom, namespace, name) == ["node-1", "node-3"]

    hold_unchanged(core, after, "written again while node-2 kept passing: once per recovery")

    extender.set({n: 1 for n in NODES})
    wait_for(lambda: violating(custom, namespace, name) == NODES, DEADLINE, "node-2 violating again")
    extender.set({"node-1": 1, "node-2": 0, "node-3": 1})
    again = wait_for(lambda: (now := recovered_at(core))["node-2"] != after["node-2"] and now,
                     DEADLINE, "a new value for node-2's second recovery")
    assert {n: again[n] for n in ("node-1", "node-3")} == {n: before[n] for n in ("node-1", "node-3")}

    sent = next(line for line in httpx.get(f"http://127.0.0.1:{extender.port}/metrics").text.splitlines()
                if line.startswith('tas_extender_node_requeue_patches_total{result="sent"}'))
    assert float(sent.split()[-1]) >= 2, sent


def test_turned_off_the_extender_writes_no_annotation(api_client, kubeconfig, crd, tmp_path, namespace):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    port = free_port()
    metrics = Metrics(tmp_path / "metrics.prom", port)
    with serving_extender([*serve_args(kubeconfig, metrics, namespace), "--no-requeue-on-recovery"], port,
                          tmp_path / "extender.log", DEADLINE):
        name = every_node_fails(custom, namespace, metrics)
        before = recovered_at(core)
        metrics.set({"node-1": 1, "node-2": 0, "node-3": 1})
        wait_for(lambda: violating(custom, namespace, name) == ["node-1", "node-3"], DEADLINE,
                 "the leader's round saw node-2 recover")
        hold_unchanged(core, before, "an annotation written with --no-requeue-on-recovery")
