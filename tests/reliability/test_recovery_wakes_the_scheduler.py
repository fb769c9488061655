"""A pod that every node's metrics forbid waits; once one node's metric is allowed again it is
bound there within the suite's deadline, not at kube-scheduler's own flush of unschedulable pods
(every pod waiting longer than 5 minutes).

Nothing else tells the scheduler: a metric is no cluster event. The extender's leader changes the
node's annotation `telemetry.intel.com/recovered-at` (on by default; the role's
`extender_requeue_on_recovery`), and that Node update is an event the scheduler retries the pods
the extender rejected on. The test checks that the annotation changed, and before the bind.
Without it the pod would wait for the flush; that is not tested here (5 minutes).
"""

from __future__ import annotations

import datetime

from kubernetes import client
from provisioned import DEADLINE, NODES, bound_pods, create_policy, health_rule, run_pods, wait_bound, wait_seconds_of
from support import served_health, wait_for

ANNOTATION = "telemetry.intel.com/recovered-at"
# Past the pod's backoff (at most 10 s) and the extra retry its own status update brings: after
# this the pod sits in the unschedulable pool, and only an event (or the flush) moves it.
SETTLED_SECONDS = 15


def recovered_at(core: client.CoreV1Api, node: str) -> str | None:
    return (core.read_node(node).metadata.annotations or {}).get(ANNOTATION)


def refusals(api_client, namespace: str, policy: str) -> list[str]:
    """FailedScheduling messages of the namespace's pods that carry the extender's reason."""
    events = client.CoreV1Api(api_client).list_namespaced_event(namespace, field_selector="reason=FailedScheduling")
    return [e.message for e in events.items if e.involved_object.kind == "Pod" and f"{policy}: dontschedule" in
            (e.message or "")]


def scheduled_at(pod: client.V1Pod) -> datetime.datetime:
    """When the pod's PodScheduled condition turned True (the API server keeps whole seconds)."""
    return next(c.last_transition_time for c in pod.status.conditions or []
                if c.type == "PodScheduled" and c.status == "True")


def test_a_pod_every_node_refuses_is_bound_once_one_node_recovers(api_client, namespace, stack, extender, healthy):
    if extender.metric("tas_extender_node_requeue_patches_total") is None:
        raise AssertionError("the provisioned extender does not annotate recovered nodes: provision the stack "
                             "with this extender (make demo-kwok)")
    core = client.CoreV1Api(api_client)
    policy = create_policy(api_client, namespace, health_rule("dontschedule"))
    stack.set_health({n: 1 for n in NODES})
    wait_for(lambda: served_health(api_client) == dict.fromkeys(NODES, "1"), DEADLINE,
             "the custom metrics API serving health_metric 1 for every node")
    wait_for(lambda: extender.failed(namespace, policy) == set(NODES), DEADLINE, "the extender refusing every node")

    run_pods(api_client, namespace, policy, 1)
    wait_for(lambda: refusals(api_client, namespace, policy), DEADLINE,
             "a FailedScheduling event naming the policy's dontschedule rule")
    wait_seconds_of(lambda: not bound_pods(api_client, namespace), SETTLED_SECONDS,
                    "the pod was bound while every node broke the policy")

    before = {n: recovered_at(core, n) for n in NODES}
    stack.set_health({"node-2": 0})
    (pod,) = wait_bound(api_client, namespace, 1, DEADLINE)
    assert pod.spec.node_name == "node-2", pod.spec.node_name

    after = recovered_at(core, "node-2")
    assert after is not None and after != before["node-2"], (
        f"node-2's {ANNOTATION} did not change ({before['node-2']!r} -> {after!r})")
    written = datetime.datetime.fromisoformat(after.replace("Z", "+00:00"))
    assert written.replace(microsecond=0) <= scheduled_at(pod), (
        f"the annotation ({after}) was written after the pod was bound ({scheduled_at(pod)})")
    assert {n: recovered_at(core, n) for n in ("node-1", "node-3")} == {n: before[n] for n in ("node-1", "node-3")}, \
        "the annotation of a node that kept failing changed"
