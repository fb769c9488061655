"""The TASPolicy controller against the local cluster's real API server.

The extender runs as users run it (`tas-extender serve --kubeconfig ...`), with metrics from a
file the test writes, so the test controls what each node reports.
"""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from kubernetes import client

from support import wait_for
from support.controller import (DEADLINE, DESCHEDULE_AND_LABEL, GROUP, Metrics, NODES, PLURAL, VERSION, create_policy,
                                extender_replicas, node_labels)

# The fixtures kubeconfig, api_client and namespace come from tests/conftest.py; crd and extender
# from tests/integration/conftest.py.


def test_labels_follow_metrics_policy_edits_and_deletion(api_client, extender, namespace):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    name = f"ctl-{uuid.uuid4().hex[:6]}"
    label_key = f"telemetry.aware.scheduling.{name}/health"
    create_policy(custom, namespace, name, DESCHEDULE_AND_LABEL)

    extender.set({"node-1": 0, "node-2": 2, "node-3": 0})
    labels = wait_for(lambda: (l := node_labels(core))["node-2"].get(name) == "violating" and l,
                      DEADLINE, "node-2 labelled violating")
    assert labels["node-2"][label_key] == "bad"
    assert name not in labels["node-1"] and name not in labels["node-3"]

    status = wait_for(lambda: (s := custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name).get("status")) and s.get("violatingNodes") == ["node-2"] and s,
        DEADLINE, "status lists node-2")
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Valid"]["status"] == "True" and status["lastEvaluated"]
    assert conditions["Violating"]["status"] == "True" and "node-2" in conditions["Violating"]["message"]

    extender.set({"node-1": 0, "node-2": 0, "node-3": 0})
    wait_for(lambda: name not in node_labels(core)["node-2"] and label_key not in node_labels(core)["node-2"],
             DEADLINE, "node-2 labels removed when it recovers")

    # An edited rule: now 1 is bad for deschedule; node-3 reports 1.
    extender.set({"node-1": 0, "node-2": 2, "node-3": 1})
    wait_for(lambda: node_labels(core)["node-2"].get(name) == "violating", DEADLINE, "node-2 violating again")
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": {"strategies": {
        "deschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 1}]}}}})
    wait_for(lambda: (l := node_labels(core))["node-3"].get(name) == "violating" and name not in l["node-2"],
             DEADLINE, "labels follow the edited rule")

    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    wait_for(lambda: not any(k == name or k.startswith(f"telemetry.aware.scheduling.{name}/")
                             for labels in node_labels(core).values() for k in labels),
             DEADLINE, "every label of the deleted policy removed")


# Rules that never act (TAS accepts them): test_tas_migration.py.


def test_the_api_server_rejects_what_the_schema_can_say(api_client, crd, namespace):
    custom = client.CustomObjectsApi(api_client)
    with pytest.raises(client.ApiException) as caught:
        create_policy(custom, namespace, "rejected", {"dontschedule": {"rules": [
            {"metricname": "health_metric", "operator": "Above", "target": 1}]}})
    assert caught.value.status == 422
    assert "operator" in caught.value.body and "Above" in caught.value.body


def test_two_replicas_one_leader_writes_and_the_other_takes_over(api_client, kubeconfig, crd, tmp_path, namespace):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    coordination = client.CoordinationV1Api(api_client)
    metrics = Metrics(tmp_path / "metrics.prom")
    with extender_replicas(2, kubeconfig, metrics, namespace, tmp_path) as replicas:
        holder = wait_for(lambda: coordination.read_namespaced_lease("tas-extender", namespace).spec.holder_identity,
                          DEADLINE, "a leader holds the Lease")
        leader = next(i for i, (proc, _) in enumerate(replicas) if holder.endswith(f"-{proc.pid}"))

        name = f"ha-{uuid.uuid4().hex[:6]}"
        create_policy(custom, namespace, name, DESCHEDULE_AND_LABEL)
        metrics.set({"node-1": 2, "node-2": 0, "node-3": 0})
        wait_for(lambda: node_labels(core)["node-1"].get(name) == "violating", DEADLINE, "leader labels node-1")

        replicas[leader][0].kill()  # no chance to release the Lease: the other must wait it out
        follower_port = replicas[1 - leader][1]
        metrics.set({"node-1": 0, "node-2": 0, "node-3": 2})
        answers: list[object] = []

        def relabelled() -> bool:
            # The follower serves the scheduler all along, not only once it leads.
            try:
                answers.append(httpx.post(f"http://127.0.0.1:{follower_port}/scheduler/filter", timeout=5, json={
                    "Pod": {"metadata": {"name": "p", "namespace": namespace}}, "NodeNames": NODES}).status_code)
            except httpx.HTTPError as error:
                answers.append(repr(error))
            labels = node_labels(core)
            return labels["node-3"].get(name) == "violating" and name not in labels["node-1"]

        # It takes over label writing once the Lease (15 s) expires.
        wait_for(relabelled, DEADLINE + 15, "the follower takes over and relabels")
        assert len(answers) > 10 and set(answers) == {200}, answers
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        wait_for(lambda: not any(k == name for labels in node_labels(core).values() for k in labels),
                 DEADLINE, "labels removed after the policy is deleted")


def test_a_leader_that_shuts_down_hands_the_lease_over_at_once(api_client, kubeconfig, crd, tmp_path, namespace):
    coordination = client.CoordinationV1Api(api_client)
    metrics = Metrics(tmp_path / "metrics.prom")
    with extender_replicas(2, kubeconfig, metrics, namespace, tmp_path) as served:
        replicas = [proc for proc, _ in served]
        holder = wait_for(lambda: coordination.read_namespaced_lease("tas-extender", namespace).spec.holder_identity,
                          DEADLINE, "a leader holds the Lease")
        leader = next(p for p in replicas if holder.endswith(f"-{p.pid}"))
        follower = next(p for p in replicas if p is not leader)
        leader.terminate()  # SIGTERM, as Kubernetes stops a pod
        leader.wait(15)
        # The Lease lasts 15 s; a released one is taken at the follower's next try (5 s).
        wait_for(lambda: coordination.read_namespaced_lease("tas-extender", namespace).spec.holder_identity
                 == holder.rsplit("-", 1)[0] + f"-{follower.pid}", 10, "the follower leads after the release")


def test_a_policy_churned_100_times_ends_with_exactly_the_right_labels_and_status(api_client, extender, namespace):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    name = f"churn-{uuid.uuid4().hex[:6]}"
    label_key = f"telemetry.aware.scheduling.{name}/health"
    extender.set({"node-1": 2, "node-2": 1, "node-3": 0})

    def spec(target: int) -> dict:
        return {"spec": {"strategies": {
            "deschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": target}]},
            "labeling": {"rules": [{"metricname": "health_metric", "operator": "GreaterThan", "target": target,
                                    "labels": ["health=bad"]}]}}}}

    for i in range(100):
        create_policy(custom, namespace, name, spec(i % 3)["spec"]["strategies"])
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, spec((i + 1) % 3))
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    create_policy(custom, namespace, name, spec(0)["spec"]["strategies"])
    final = custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, spec(1))

    # Target 1: node-2 (Equals 1) is descheduled; node-1 (2 > 1) is labelled health=bad.
    def ours() -> dict[str, dict[str, str]]:
        return {n: {k: v for k, v in labels.items() if k in (name, label_key)}
                for n, labels in node_labels(core).items()}

    def exactly_right() -> bool:
        return ours() == {"node-1": {label_key: "bad"}, "node-2": {name: "violating"}, "node-3": {}}

    wait_for(exactly_right, DEADLINE, "labels of the final policy, and none of the earlier ones")
    generation = final["metadata"]["generation"]
    status = wait_for(lambda: (s := custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
                               .get("status")) and s.get("observedGeneration") == generation and s,
                      DEADLINE, "status of the final generation")
    assert status["violatingNodes"] == ["node-2"]
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Valid": "True", "Violating": "True"}
    wait_seconds_of_labels = 5  # the labels stay right: no late event of an earlier incarnation undoes them
    deadline = time.monotonic() + wait_seconds_of_labels
    while time.monotonic() < deadline:
        assert exactly_right(), ours()
        time.sleep(0.5)
