"""The load-aware mode on the local cluster: site.yml with tas_load_aware on, then off.

Each fake node reports its load through its textfile collector (simulated_*_usage_percent, as
the local inventory's recording rules read it): node-1 overloaded, node-2 busy, node-3 idle.
"""

from __future__ import annotations

import collections

from kubernetes import client

from provisioned import DEADLINE, NODES, extender_may, run_playbook
from support import wait_for, write_simulated_loads

LOAD = {"node-1": 95, "node-2": 55, "node-3": 10}  # percent, CPU and memory alike
MANAGED_KEY = "telemetry.intel.com/load-annotations"


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


def test_pods_go_to_the_least_loaded_node_and_a_burst_is_spread(api_client, namespace, stack, extender, healthy):
    core = client.CoreV1Api(api_client)
    write_loads(stack, LOAD)
    try:
        play = run_playbook("playbooks/site.yml", "-e", "tas_load_aware=true")
        assert play.returncode == 0, play.stdout[-3000:] + play.stderr[-2000:]

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
    finally:
        write_loads(stack, None)
        off = run_playbook("playbooks/site.yml")
    assert off.returncode == 0, off.stdout[-3000:] + off.stderr[-2000:]
    # Turned off, the extender takes its annotations off the nodes.
    wait_for(lambda: not any(MANAGED_KEY in a or "cpu_usage_avg_5m" in a for a in annotations(core).values()),
             DEADLINE, "load annotations removed")
    assert not extender_may(api_client, "watch", "", "pods", "", "")
