"""Load-aware mode on the real-node cluster with the roles' defaults (`site.yml -e tas_load_aware=true`
and nothing else but where the load comes from): crane's annotations on every worker, a new pod
on the idle node, and pods moved off a hot node by the descheduler's LowNodeUtilization, one a
run, their replacements placed by load.

Simulated load, named as such: the real nodes share this machine's CPUs, so node-exporter's CPU
counters are the same on every node. Each node's textfile collector reports
`simulated_cpu_usage_percent` (and memory alike) instead, and the prometheus role's load rules read
it (`prometheus_load_rules_*_expr`, as the KWOK inventory sets them); everything after the rules
(annotator, filter, scores, the descheduler's query and its evictions) is what runs with real load.
"""

from __future__ import annotations

import datetime
import json
import uuid

from kubernetes import client

from conftest import WORKERS, ansible_playbook, node_path
from support import wait_for, write_simulated_loads
from test_in_cluster import (DEADLINE, DEMO_NS, crowd_node_1, descheduler_paused, descheduler_run_now, eviction_lines,
                             placed_probe)

LOAD = {"node-1": 95, "node-2": 50, "node-3": 10}  # percent: hot, between the marks, idle
SIMULATED = ["-e", json.dumps({f"prometheus_load_rules_{kind}_expr": f"max by (instance, node) (simulated_{kind}_usage_percent)"
                               for kind in ("cpu", "mem")})]
MANAGED_KEY = "telemetry.intel.com/load-annotations"


def write_loads(loads: dict[str, int] | None) -> None:
    write_simulated_loads({node: node_path(node, "/var/lib/node-exporter") for node in WORKERS}, loads)


def annotations(core: client.CoreV1Api) -> dict[str, dict[str, str]]:
    return {n: core.read_node(n).metadata.annotations or {} for n in WORKERS}


def test_pods_move_off_a_hot_node_one_a_run_and_go_where_the_load_is_low(api_client):
    core, apps, batch = client.CoreV1Api(api_client), client.AppsV1Api(api_client), client.BatchV1Api(api_client)
    name = f"busy-{uuid.uuid4().hex[:6]}"
    # placed while load-aware mode is off, all on node-1 (the others cordoned meanwhile)
    crowd_node_1(core, apps, name, 4)
    try:
        # the load written first, so that the annotator's first sync (when the new extender
        # leads) finds it in the rolled Prometheus rather than waiting a sync period (3 min)
        write_loads(LOAD)
        ansible_playbook("playbooks/site.yml", "-e", "tas_load_aware=true", *SIMULATED)
        # the descheduler runs when the test starts it: a pod moved before the extender knows the
        # load could be placed anywhere
        with descheduler_paused(batch):
            # the leader annotates each worker in crane's format: "<fraction>,<UTC time>Z"
            wait_for(lambda: all((a := annotations(core)[n]).get("cpu_usage_avg_5m", "").startswith(f"{LOAD[n] / 100:.5f},")
                                 and MANAGED_KEY in a for n in WORKERS), DEADLINE * 2, "crane's load annotations on every worker")

            # a new pod goes to the idle node
            assert placed_probe(core) == "node-3"
            resumed = datetime.datetime.now(datetime.UTC)

            # node-1 above the high mark (65 %), node-3 below the low one (30 %): a run moves one
            # pod off node-1 (the crowd's or the demo's), though more could go: LowNodeUtilization
            # cannot tell how much of a Prometheus figure one pod makes, so it moves one per hot
            # node and run. The extender places its replacement off node-1. A run may find no
            # figure yet (the descheduler reads Prometheus itself): runs until one moves a pod.
            counts = []
            for _ in range(5):
                _, evicted, log = descheduler_run_now(core, batch)
                counts.append(evicted)
                if evicted:
                    break
            assert counts[-1] == 1 and not any(counts[:-1]), (counts, eviction_lines(log))

        def replacements() -> list[client.V1Pod]:
            pods = core.list_namespaced_pod(DEMO_NS).items
            return [p for p in pods if p.metadata.creation_timestamp > resumed and not p.metadata.deletion_timestamp]

        wait_for(lambda: replacements() and all(p.spec.node_name for p in replacements()), DEADLINE,
                 "the replacement placed")
        placed = {p.metadata.name: p.spec.node_name for p in replacements()}
        assert "node-1" not in placed.values(), placed
    finally:
        apps.delete_namespaced_deployment(name, DEMO_NS)
        write_loads(None)
        ansible_playbook("playbooks/site.yml")
        wait_for(lambda: not any(MANAGED_KEY in a or "cpu_usage_avg_5m" in a for a in annotations(core).values()),
                 DEADLINE, "the load annotations taken off the nodes")
