"""The load-aware mode on the local cluster: site.yml with tas_load_aware on (once, for the tests
of this module, in their order), then off again (the last test).

Each fake node reports its load through its textfile collector (simulated_*_usage_percent, as
the local inventory's recording rules read it): node-1 overloaded, node-2 busy, node-3 idle.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client

from provisioned import (DEADLINE, EXTENDER, NODES, bound_pods, create_policy, extender_may, health_rule, run_playbook,
                         run_pods, wait_bound, wait_seconds_of)
from support import served_health, wait_for, write_simulated_loads

LOAD = {"node-1": 95, "node-2": 55, "node-3": 10}  # percent, CPU and memory alike
MANAGED_KEY = "telemetry.intel.com/load-annotations"
POLICY_PODS, PLAIN_PODS = 6, 3
HELD_SECONDS = 15  # a waiting pod is retried with a backoff of up to 10 s: tried again meanwhile


def write_loads(stack, loads: dict[str, int] | None) -> None:
    write_simulated_loads({node: stack.directory / "nodes" / node / "node-metrics" for node in NODES}, loads)


def annotations(core) -> dict[str, dict[str, str]]:
    return {n: core.read_node(n).metadata.annotations or {} for n in NODES}


def bare_pod(namespace: str, name: str) -> dict:
    """A pod of no workload (so no default topology spreading), asking nothing of the extender."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}}


def placement(core, namespace: str, count: int) -> collections.Counter:
    def bound():
        pods = core.list_namespaced_pod(namespace).items
        return len(pods) == count and all(p.spec.node_name for p in pods) and pods
    return collections.Counter(p.spec.node_name for p in wait_for(bound, DEADLINE, f"{count} pods bound"))


@pytest.fixture(scope="module")
def load_aware(stack) -> Iterator[dict[str, bool]]:
    """site.yml with tas_load_aware on, once for the module; off again afterwards if the last test
    (which turns it off and checks what that leaves) did not get to it."""
    write_loads(stack, LOAD)
    play = run_playbook("playbooks/site.yml", "-e", "tas_load_aware=true")
    assert play.returncode == 0, play.stdout[-3000:] + play.stderr[-2000:]
    state = {"on": True}
    try:
        yield state
    finally:
        if state["on"]:
            write_loads(stack, None)
            run_playbook("playbooks/site.yml")


def test_pods_go_to_the_least_loaded_node_and_a_burst_is_spread(api_client, namespace, stack, extender, healthy,
                                                                load_aware):
    core = client.CoreV1Api(api_client)
    # The leader annotates every node with its load in crane's format: "<fraction>,<UTC time>Z".
    wait_for(lambda: all((a := annotations(core)[n]).get("cpu_usage_avg_5m", "").startswith(f"{LOAD[n] / 100:.5f},")
                         and MANAGED_KEY in a for n in NODES), DEADLINE, "load annotations on every node")

    # Only now may it watch pods (where they are bound, for crane's hot value).
    assert extender_may(api_client, "watch", "", "pods", "", "")

    # The extender counts a binding when its pod watch shows the pod on a node; kube-scheduler
    # binds asynchronously and places the next pod meanwhile. So each pod is created once the
    # extender has counted the one before: what is tested is the hot value's arithmetic on a
    # real scheduler, not how fast a watch event beats the next scheduling cycle.
    counted = extender.metric("tas_extender_load_bindings_total") or 0.0

    def create_and_count(name: str, pods: int) -> collections.Counter:
        nonlocal counted
        core.create_namespaced_pod(namespace, bare_pod(namespace, name))
        placed = placement(core, namespace, pods)
        counted += 1
        wait_for(lambda: (extender.metric("tas_extender_load_bindings_total") or 0.0) >= counted, DEADLINE,
                 f"the extender to count {name}'s binding")
        return placed

    # One at a time: each new pod goes to the idle node.
    for i in range(2):
        assert create_and_count(f"single-{i}", i + 1) == {"node-3": i + 1}

    # A burst, 12 pods in well under a minute: node-3 turns hot (crane's hot value: a point per
    # 2 pods a minute, per 5 in five) and node-2 takes the rest; node-1, above the 65 % threshold, takes none.
    for i in range(12):
        placed = create_and_count(f"burst-{i}", 3 + i)
    print(f"burst placement: {dict(placed)}")
    assert placed["node-1"] == 0, placed
    assert placed["node-2"] >= 3 and placed["node-3"] >= 3, f"the burst piled onto one node: {placed}"


def test_with_the_extender_down_policy_pods_wait_and_every_other_pod_is_placed(
        api_client, namespace, stack, extender, healthy, load_aware, extender_down):
    # Two entries: the policy's (its pods, not ignorable) and the load entry (every pod, ignorable).
    config = yaml.safe_load((stack.directory / "kube-scheduler" / "config.yaml").read_text())
    entries = {e["filterVerb"]: e for e in config["extenders"]}
    assert entries["filter"]["ignorable"] is False and entries["filter"]["managedResources"], entries
    assert entries["load-filter"]["ignorable"] is True and not entries["load-filter"].get("managedResources"), entries

    policy = create_policy(api_client, namespace, health_rule("dontschedule"))
    stack.set_health({"node-2": 1})  # the policy keeps its pods off node-2, before and after the outage
    wait_for(lambda: served_health(api_client).get("node-2") == "1", DEADLINE,
             "the custom metrics API serving node-2's health_metric 1")
    core = client.CoreV1Api(api_client)
    run_pods(api_client, namespace, policy, POLICY_PODS)
    for i in range(PLAIN_PODS):
        core.create_namespaced_pod(namespace, bare_pod(namespace, f"plain-{i}"))

    def policy_pods_bound() -> list[str]:
        return [p.metadata.name for p in bound_pods(api_client, namespace)
                if (p.metadata.labels or {}).get("app") == "load"]

    plain = wait_for(lambda: len(b := [p for p in bound_pods(api_client, namespace)
                                       if p.metadata.name.startswith("plain-")]) == PLAIN_PODS and b,
                     DEADLINE, f"the {PLAIN_PODS} plain pods placed without the extender (the load entry is ignorable)")
    assert plain and not stack.running(EXTENDER)
    wait_seconds_of(lambda: not policy_pods_bound() and not stack.running(EXTENDER), HELD_SECONDS,
                    "no policy pod is bound while the extender is down")

    stack.supervisorctl("start", EXTENDER)
    bound = wait_bound(api_client, namespace, POLICY_PODS + PLAIN_PODS)
    where = {p.metadata.name: p.spec.node_name for p in bound if (p.metadata.labels or {}).get("app") == "load"}
    assert len(where) == POLICY_PODS and "node-2" not in where.values(), f"policy pods where it forbids: {where}"


def test_turned_off_the_annotations_go_and_pods_are_no_longer_watched(api_client, stack, load_aware):
    core = client.CoreV1Api(api_client)
    write_loads(stack, None)
    off = run_playbook("playbooks/site.yml")
    load_aware["on"] = False
    assert off.returncode == 0, off.stdout[-3000:] + off.stderr[-2000:]
    # Turned off, the extender takes its annotations off the nodes.
    wait_for(lambda: not any(MANAGED_KEY in a or "cpu_usage_avg_5m" in a for a in annotations(core).values()),
             DEADLINE, "load annotations removed")
    assert not extender_may(api_client, "watch", "", "pods", "", "")
    config = yaml.safe_load((stack.directory / "kube-scheduler" / "config.yaml").read_text())
    assert [e["filterVerb"] for e in config["extenders"]] == ["filter"], config["extenders"]
