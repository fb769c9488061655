"""The extender down while pods are created: what the scheduler does with `ignorable` false and
true, and supervisord bringing a killed extender back.

kube-scheduler calls the extender for every pod that requests telemetry/scheduling, before it
binds it. With `ignorable: false` a call that fails stops the pod's scheduling cycle: the pod
stays Pending, with a FailedScheduling event carrying the call's error, and is retried until
the extender answers again. With `ignorable: true` (Intel TAS's setting; in load-aware mode the load
entry's) the scheduler skips the extender and binds anyway. The fixture extender_down is in conftest.py.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import httpx
import pytest
import yaml
from kubernetes import client

from provisioned import (DEADLINE, EXTENDER, NODES, Stack, bound_pods, create_policy, health_rule, labelled,
                         run_pods, wait_bound, wait_seconds_of)
from support import served_health, wait_for

PODS = 10
SCHEDULER = "kube-scheduler"
# A pod that waits is retried with a backoff of up to 10 s: held this long, it has been tried
# again several times against the dead extender.
HELD_SECONDS = 15


def restart_scheduler(stack: Stack) -> None:
    stack.supervisorctl("restart", SCHEDULER)
    wait_for(lambda: httpx.get("https://127.0.0.1:10259/healthz", verify=False, timeout=2).text == "ok",
             DEADLINE, "kube-scheduler healthy again")


def with_ignorable(stack: Stack, ignorable: bool) -> Iterator[None]:
    """kube-scheduler's configuration (site.yml's) with every extender's `ignorable` set, then
    the file exactly as it was, each followed by a restart of kube-scheduler."""
    path = stack.directory / "kube-scheduler" / "config.yaml"
    original = path.read_text()
    config = yaml.safe_load(original)
    assert config.get("extenders"), f"{path} configures no extender: provision the stack first (make demo)"
    for extender in config["extenders"]:
        extender["ignorable"] = ignorable
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        restart_scheduler(stack)
        yield
    finally:
        path.write_text(original)
        restart_scheduler(stack)


@pytest.fixture
def not_ignorable(stack) -> Iterator[None]:
    yield from with_ignorable(stack, False)


@pytest.fixture
def ignorable(stack) -> Iterator[None]:
    yield from with_ignorable(stack, True)


def scheduling_errors(api_client, namespace: str) -> list[str]:
    """Messages of the FailedScheduling events of the namespace's pods."""
    events = client.CoreV1Api(api_client).list_namespaced_event(namespace, field_selector="reason=FailedScheduling")
    return [e.message or "" for e in events.items if e.involved_object.kind == "Pod"]


def pending_for_the_extender(api_client, namespace: str) -> list[client.V1Pod]:
    """Pods whose PodScheduled condition is False because the filter call to the extender failed."""
    pods = client.CoreV1Api(api_client).list_namespaced_pod(namespace).items
    return [p for p in pods if not p.spec.node_name and any(
        c.type == "PodScheduled" and c.status == "False" and "/scheduler/filter" in (c.message or "")
        for c in p.status.conditions or [])]


def wait_pending_for_the_extender(api_client, namespace: str) -> None:
    wait_for(lambda: len(pending_for_the_extender(api_client, namespace)) == PODS, DEADLINE,
             f"all {PODS} pods Pending, their PodScheduled condition naming the failed filter call")
    errors = wait_for(lambda: scheduling_errors(api_client, namespace), DEADLINE, "FailedScheduling events")
    assert all("/scheduler/filter" in message for message in errors), errors


def test_pods_created_while_the_extender_is_down_wait_and_bind_once_it_is_back(
        api_client, namespace, stack, extender, healthy, not_ignorable, extender_down):
    policy = create_policy(api_client, namespace, {**health_rule("dontschedule"), **health_rule("deschedule")})
    stack.set_health({"node-2": 1})
    run_pods(api_client, namespace, policy, PODS)

    wait_pending_for_the_extender(api_client, namespace)
    wait_seconds_of(lambda: not bound_pods(api_client, namespace) and not stack.running(EXTENDER), HELD_SECONDS,
                    "no pod is bound while the extender is down")

    stack.supervisorctl("start", EXTENDER)
    wait_bound(api_client, namespace, PODS)
    wait_for(lambda: labelled(api_client, policy) == {"node-2"}, DEADLINE, "the restarted extender labels node-2")


# A restarted extender answers filter with an Error until it has fetched the listed policies'
# metrics (before that, a missing metric would fail open and let pods onto node-2).
def test_pods_waiting_for_a_restarted_extender_bind_only_where_the_policy_allows(
        api_client, namespace, stack, extender, healthy, not_ignorable, extender_down):
    policy = create_policy(api_client, namespace, health_rule("dontschedule"))
    stack.set_health({"node-2": 1})  # the policy keeps pods off node-2, before and after the outage
    # ...once the pipeline serves it: the restarted extender reads the custom metrics API, and
    # the textfile reaches it only a scrape and a relist later.
    wait_for(lambda: served_health(api_client).get("node-2") == "1", DEADLINE,
             "the custom metrics API serving node-2's health_metric 1")
    run_pods(api_client, namespace, policy, PODS)
    wait_pending_for_the_extender(api_client, namespace)

    stack.supervisorctl("start", EXTENDER)
    where = {p.metadata.name: p.spec.node_name for p in wait_bound(api_client, namespace, PODS)}
    assert set(where.values()) <= set(NODES) - {"node-2"}, f"pods bound where the policy forbids: {where}"


def test_with_ignorable_true_pods_bind_while_the_extender_is_down(api_client, namespace, stack, extender, healthy,
                                                                   ignorable, extender_down):
    policy = create_policy(api_client, namespace, health_rule("dontschedule"))
    run_pods(api_client, namespace, policy, PODS)
    wait_bound(api_client, namespace, PODS)
    assert not stack.running(EXTENDER), "the pods were bound while the extender was down, without it"


def test_a_killed_extender_is_restarted_by_supervisord_and_catches_up_with_the_metrics(
        api_client, namespace, stack, extender, healthy):
    policy = create_policy(api_client, namespace, {**health_rule("dontschedule"), **health_rule("deschedule")})
    stack.set_health({"node-2": 1})
    wait_for(lambda: labelled(api_client, policy) == {"node-2"}, DEADLINE, "node-2 labelled for descheduling")
    pid = stack.pid(EXTENDER)

    os.kill(pid, signal.SIGKILL)
    stack.set_health({"node-2": 0, "node-3": 1})  # changes the extender must catch up with

    wait_for(lambda: stack.running(EXTENDER) and stack.pid(EXTENDER) != pid, DEADLINE, "supervisord restarted it")
    wait_for(lambda: extender.get("/readyz").status_code == 200, DEADLINE, "the restarted extender is ready")
    wait_for(lambda: labelled(api_client, policy) == {"node-3"}, DEADLINE,
             "labels converged on the metrics that changed while it was down")
    wait_for(lambda: extender.failed(namespace, policy) == {"node-3"}, DEADLINE, "it filters on the new metrics")
