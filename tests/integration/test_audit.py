"""Audit mode against the local cluster's real API server: a TASPolicy annotated
telemetry.intel.com/enforcement=audit is reported (status, pod Events) and enforced nowhere
(no node label, no filtering), and the annotation alone switches it to enforce and back.

The extender runs as users run it, with metrics from a file the test writes (tests/integration/conftest.py).
"""

from __future__ import annotations

import uuid

import httpx
from kubernetes import client
from support import wait_for
from support.controller import DEADLINE, GROUP, NODES, PLURAL, VERSION, node_labels

ENFORCEMENT = "telemetry.intel.com/enforcement"
# Both broken by a node reporting 2: it would be filtered and labelled violating.
STRATEGIES = {
    "dontschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 2}]},
    "deschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 2}]},
}


def create_audit_policy(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TASPolicy",
            "metadata": {"name": name, "namespace": namespace, "annotations": {ENFORCEMENT: "audit"}},
            "spec": {"strategies": STRATEGIES}}
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def set_enforcement(custom: client.CustomObjectsApi, namespace: str, name: str, value: str) -> dict:
    """What `kubectl annotate taspolicy NAME telemetry.intel.com/enforcement=VALUE --overwrite` does."""
    return custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                                 {"metadata": {"annotations": {ENFORCEMENT: value}}})


def status_of(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name).get("status") or {}


def conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status.get("conditions") or []}


def create_pod(core: client.CoreV1Api, namespace: str, policy: str) -> dict:
    """A pod of the policy that no scheduler places: the test sends its metadata to the extender
    as kube-scheduler would. Its metadata, as the scheduler sends it."""
    pod = core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"web-{uuid.uuid4().hex[:6]}", "labels": {"telemetry-policy": policy}},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}})
    return {"name": pod.metadata.name, "namespace": namespace, "uid": pod.metadata.uid,
            "labels": pod.metadata.labels}


def filtered(port: int, pod: dict) -> dict[str, str]:
    """The extender's FailedNodes for the pod over every node."""
    answer = httpx.post(f"http://127.0.0.1:{port}/scheduler/filter", timeout=10,
                        json={"Pod": {"metadata": pod}, "NodeNames": NODES})
    answer.raise_for_status()
    return answer.json()["FailedNodes"]


def audit_events(core: client.CoreV1Api, namespace: str, pod: str) -> list:
    return [e for e in core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
            if e.reason == "TASPolicyAudit"]


def test_an_audit_policy_is_reported_not_enforced_until_the_annotation_says_enforce(
        api_client, extender, namespace):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    name = f"audit-{uuid.uuid4().hex[:6]}"
    extender.set({"node-1": 0, "node-2": 2, "node-3": 0})
    generation = create_audit_policy(custom, namespace, name)["metadata"]["generation"]

    # Reported: the status says it is not enforced, and what it would do.
    status = wait_for(lambda: (s := status_of(custom, namespace, name)).get("violatingNodes") == ["node-2"]
                      and "Enforced" in conditions(s) and s, DEADLINE, "audit status listing node-2 as violating")
    enforced = conditions(status)["Enforced"]
    assert (enforced["status"], enforced["reason"]) == ("False", "Audit")
    assert "filter 1 node(s) (dontschedule): node-2" in enforced["message"]
    assert "label 1 node(s) violating (deschedule): node-2" in enforced["message"]
    assert conditions(status)["Valid"]["status"] == "True"
    # Not enforced: the reconcile pass that wrote that status put no label on node-2.
    assert name not in node_labels(core)["node-2"]

    # The scheduler's filter passes every node, and the pod gets an Event saying what it would have filtered.
    pod = create_pod(core, namespace, name)
    assert filtered(extender.port, pod) == {}
    [event] = wait_for(lambda: audit_events(core, namespace, pod["name"]), DEADLINE,
                       "a TASPolicyAudit Event on the pod")
    assert event.type == "Normal" and event.involved_object.uid == pod["uid"]
    assert event.message == (f"policy {namespace}/{name} is in audit mode: it would have filtered 1 of 3 node(s): "
                             "node-2 (dontschedule rule health_metric Equals 2 violated (value 2))")
    assert filtered(extender.port, pod) == {}  # a second attempt of the pod: no second Event
    assert len(audit_events(core, namespace, pod["name"])) == 1

    # The annotation alone switches it to enforce: same generation, the label and the filtering follow.
    assert set_enforcement(custom, namespace, name, "enforce")["metadata"]["generation"] == generation
    wait_for(lambda: node_labels(core)["node-2"].get(name) == "violating", DEADLINE, "node-2 labelled violating")
    wait_for(lambda: "Enforced" not in conditions(status_of(custom, namespace, name)), DEADLINE,
             "the Enforced condition gone from the status")
    assert list(wait_for(lambda: filtered(extender.port, pod), DEADLINE, "the filter failing node-2")) == ["node-2"]

    # And back to audit: the label it set while enforced is taken off.
    set_enforcement(custom, namespace, name, "audit")
    wait_for(lambda: name not in node_labels(core)["node-2"], DEADLINE,
             "node-2's violating label removed in audit mode")
    assert filtered(extender.port, pod) == {}


def test_an_unknown_enforcement_makes_the_policy_invalid_naming_the_annotation(
        api_client, extender, namespace):
    custom = client.CustomObjectsApi(api_client)
    name = f"audit-{uuid.uuid4().hex[:6]}"
    create_audit_policy(custom, namespace, name)
    set_enforcement(custom, namespace, name, "dry-run")
    valid = wait_for(lambda: (c := conditions(status_of(custom, namespace, name)).get("Valid")) and
                     c["status"] == "False" and c, DEADLINE, "Valid=False for the unknown enforcement")
    assert valid["message"] == (f"metadata.annotations.{ENFORCEMENT}: must be one of enforce, audit, "
                                "got 'dry-run'")
    set_enforcement(custom, namespace, name, "enforce")
    wait_for(lambda: conditions(status_of(custom, namespace, name))["Valid"]["status"] == "True", DEADLINE,
             "Valid=True again once the annotation is fixed")
