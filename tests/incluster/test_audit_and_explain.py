"""Audit mode and `tas-extender explain` on the real-node cluster, with the health-metric demo's
policy and the scheduler placing real pods.

node-1 is made unhealthy (health 1: the demo's dontschedule rule) and the other workers are
cordoned, so node-1 is the only node a pod can go to. In audit mode the policy is reported and
not enforced: a demo pod runs on node-1, with the extender's Event saying what it would have
filtered. The annotation alone switches it back to enforce: the next pod waits, and
`tas-extender explain` run from outside the cluster (the pod and policy read from the API server,
the metrics through the custom metrics API) gives the same verdict as the extender's filter.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid

import pytest
from kubernetes import client

from support import REAL_CLUSTER_DIR, tas_extender_command, wait_for
from support.incluster import (DEADLINE, DEMO_NS, DEMO_POLICY, WORKERS, client_tls, create_demo_pod, filter_answers,
                               filter_rejects, set_health)
from tas_extender.decide.policy import GROUP, PLURAL, VERSION

ENFORCEMENT = "telemetry.intel.com/enforcement"


def set_enforcement(custom: client.CustomObjectsApi, value: str | None) -> None:
    """`kubectl annotate taspolicy demo-policy telemetry.intel.com/enforcement=VALUE --overwrite`
    (None: the annotation removed, the default, enforce)."""
    custom.patch_namespaced_custom_object(GROUP, VERSION, DEMO_NS, PLURAL, DEMO_POLICY,
                                          {"metadata": {"annotations": {ENFORCEMENT: value}}})


def enforced_condition(custom: client.CustomObjectsApi) -> dict | None:
    status = custom.get_namespaced_custom_object(GROUP, VERSION, DEMO_NS, PLURAL, DEMO_POLICY).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Enforced"), None)


def audit_events(core: client.CoreV1Api, pod: str) -> list[str]:
    events = core.list_namespaced_event(DEMO_NS, field_selector=f"involvedObject.name={pod},reason=TASPolicyAudit")
    return [e.message for e in events.items]


def explain(pod: str) -> dict:
    result = subprocess.run([tas_extender_command(), "explain", f"{DEMO_NS}/{pod}", "-o", "json",
                             "--kubeconfig", str(REAL_CLUSTER_DIR / "kubeconfig"),
                             "--metrics-source", "custom-metrics"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.usefixtures("healthy_nodes_after")
def test_an_audited_policy_lets_a_pod_run_where_it_would_be_filtered_and_explain_agrees_with_the_filter(api_client):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    names = [f"audit-{uuid.uuid4().hex[:6]}", f"enforce-{uuid.uuid4().hex[:6]}"]
    set_health("node-1", 1)
    wait_for(lambda: filter_rejects(core, client_tls(), "node-1"), DEADLINE, "the filter to reject node-1")
    try:
        set_enforcement(custom, "audit")
        wait_for(lambda: (c := enforced_condition(custom)) and c["reason"] == "Audit", DEADLINE,
                 "the policy's status to say it is audited, not enforced")
        wait_for(lambda: (answers := filter_answers(core, client_tls())) and not any("node-1" in a for a in answers),
                 DEADLINE, "every extender replica to pass node-1 while the policy is audited")
        for node in ("node-2", "node-3"):
            core.patch_node(node, {"spec": {"unschedulable": True}})

        # audit: the pod runs on node-1, told what the policy would have done
        create_demo_pod(core, names[0])
        wait_for(lambda: core.read_namespaced_pod(names[0], DEMO_NS).status.phase == "Running", DEADLINE,
                 f"{names[0]} Running on node-1 although the policy's rule rejects it")
        assert core.read_namespaced_pod(names[0], DEMO_NS).spec.node_name == "node-1"
        [said] = wait_for(lambda: audit_events(core, names[0]), DEADLINE, f"a TASPolicyAudit Event on {names[0]}")
        assert f"policy {DEMO_NS}/{DEMO_POLICY} is in audit mode: it would have filtered" in said, said
        assert "node-1 (dontschedule rule health_metric" in said, said

        # enforce again, by the annotation alone: the next pod waits
        set_enforcement(custom, None)
        wait_for(lambda: enforced_condition(custom) is None, DEADLINE, "the Enforced condition gone from the status")
        wait_for(lambda: filter_rejects(core, client_tls(), "node-1"), DEADLINE, "the filter to reject node-1 again")
        create_demo_pod(core, names[1])
        wait_for(lambda: any(c.type == "PodScheduled" and c.status == "False"
                             for c in core.read_namespaced_pod(names[1], DEMO_NS).status.conditions or []),
                 DEADLINE, f"{names[1]} unschedulable while node-1 is the only node left")

        # explain, from outside the cluster, says what the filter says
        document = explain(names[1])
        assert document["policy"] == f"{DEMO_NS}/{DEMO_POLICY}"
        assert document["nodes"]["node-1"]["passed"] is False
        assert "health_metric" in document["nodes"]["node-1"]["reason"]
        assert document["nodes"]["node-1"]["metrics"]["health_metric"]["value"] == 1.0
        pod = api_client.sanitize_for_serialization(core.read_namespaced_pod(names[1], DEMO_NS).metadata)
        filtered = filter_answers(core, client_tls(), pod)[0]
        explained = sorted(n for n in WORKERS if not document["nodes"][n]["passed"])
        assert sorted(filtered) == explained, (filtered, document)
    finally:
        set_enforcement(custom, None)
        for node in ("node-2", "node-3"):
            core.patch_node(node, {"spec": {"unschedulable": False}})
        for name in names:
            with contextlib.suppress(client.exceptions.NotFoundException):  # not created: failed before
                core.delete_namespaced_pod(name, DEMO_NS, grace_period_seconds=0)
