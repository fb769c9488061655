"""An upgrade from the previous release while pods are being scheduled: none may be placed against
its policy, none may be lost.

Marked `upgrade`: molecule's realnode scenario installs the previous release first (its own tree
and extender image, $TAS_UPGRADE_FROM_IMAGE, and its demo), then runs this, which upgrades the
cluster by running this release's site.yml as a user would, with the roles' defaults.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from kubernetes import client

from support import EXTENDER_IMAGE, record_figure, wait_for
from support.incluster import (DEADLINE, DEMO_NS, EXTENDER_NS, ansible_playbook, client_tls, create_demo_pod,
                               filter_rejects, ready_pods, set_health)

pytestmark = pytest.mark.upgrade

# intel.tas's extender_image default, which site.yml installs: tas-extender:<extender_version>, the
# version of this tree's extender (tests/unit/collection/test_role_defaults.py ties the two).
THIS_RELEASE_IMAGE = EXTENDER_IMAGE
EVERY = 3  # seconds between two pods of the stream
# Where the previous release (0.3.0) keeps kube-scheduler's client pair: at the top of the PKI
# directory; this one keeps it in a directory of its own (support.incluster.SCHEDULER_PAIR).
PREVIOUS_RELEASE_PAIR = "/etc/tas/pki/scheduler-client"


def extender_images(core: client.CoreV1Api) -> set[str]:
    return {c.image for p in ready_pods(core, EXTENDER_NS, "app.kubernetes.io/name=tas-extender")
            for c in p.spec.containers}


def scheduled_after(pod: client.V1Pod) -> float:
    """Seconds from the pod's creation to its PodScheduled condition."""
    scheduled = next(c for c in pod.status.conditions if c.type == "PodScheduled" and c.status == "True")
    return (scheduled.last_transition_time - pod.metadata.creation_timestamp).total_seconds()


def test_pods_created_while_site_yml_upgrades_the_previous_release_all_run_where_their_policy_allows(
        api_client, healthy_nodes_after):
    previous = os.environ.get("TAS_UPGRADE_FROM_IMAGE")
    assert previous, "$TAS_UPGRADE_FROM_IMAGE is unset: molecule's realnode scenario installs the previous release first"
    core = client.CoreV1Api(api_client)
    assert extender_images(core) == {previous}, "the previous release is not what runs"

    set_health("node-2", 2)  # the demo's policy: no pod on node-2 (dontschedule health_metric == 2)
    tls = client_tls(pair=PREVIOUS_RELEASE_PAIR)
    wait_for(lambda: filter_rejects(core, tls, "node-2"), DEADLINE, "the previous release's extender to reject node-2")

    created: list[str] = []
    stop = threading.Event()
    failures: list[BaseException] = []

    def stream() -> None:
        while not stop.is_set():
            name = f"upgrade-{len(created):03d}"
            try:
                create_demo_pod(core, name)
            except BaseException as error:  # noqa: BLE001 - reported by the test below
                failures.append(error)
                return
            created.append(name)
            stop.wait(EVERY)

    streaming = threading.Thread(target=stream, name="pod-stream")
    started = time.monotonic()
    streaming.start()
    try:
        ansible_playbook("playbooks/site.yml")
        upgraded = time.monotonic() - started
        wait_for(lambda: extender_images(core) == {THIS_RELEASE_IMAGE} and len(ready_pods(
            core, EXTENDER_NS, "app.kubernetes.io/name=tas-extender")) >= 2, DEADLINE,
            "both replicas of this release's extender ready")
        # and a few more pods once this release runs
        after = len(created)
        wait_for(lambda: len(created) >= after + 5 or failures, DEADLINE, "five more pods created after the upgrade")
    finally:
        stop.set()
        streaming.join()
    try:
        assert not failures, f"creating a pod failed during the upgrade: {failures[0]}"
        assert len(created) >= upgraded / EVERY / 2, (len(created), upgraded)
        wait_for(lambda: all(core.read_namespaced_pod(n, DEMO_NS).status.phase == "Running" for n in created),
                 DEADLINE, f"all {len(created)} pods created during the upgrade running")
        pods = [core.read_namespaced_pod(n, DEMO_NS) for n in created]
        placed = {p.metadata.name: p.spec.node_name for p in pods}
        assert "node-2" not in placed.values(), {n: node for n, node in placed.items() if node == "node-2"}
        assert filter_rejects(core, client_tls(), "node-2")
        waits = sorted(scheduled_after(p) for p in pods)
        record_figure(f"upgrade from {previous}: site.yml took {upgraded:.0f} s; {len(created)} pods created "
                      f"throughout, none on node-2; scheduled after median {waits[len(waits) // 2]:.0f} s, "
                      f"longest {waits[-1]:.0f} s")
    finally:
        for name in created:
            core.delete_namespaced_pod(name, DEMO_NS, grace_period_seconds=0)
