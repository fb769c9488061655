"""scheduler_config_mode: second_scheduler on the real-node cluster: a kube-scheduler of the
cluster's version as a Deployment, the extender behind its profile, pods sent to it by the
MutatingAdmissionPolicy on their policy label, no file of any control-plane node touched.

site.yml runs once more in that mode for this module (the cluster's own scheduler keeps what the
default run gave it), and the mode is removed again afterwards.
"""

from __future__ import annotations

import hashlib
import uuid

import pytest
from kubernetes import client

from conftest import EXTENDER_NS, ansible_playbook, node_path
from support import real_control_planes, wait_for
from test_in_cluster import (DEADLINE, DEMO_NS, client_tls, demo_pod, filter_rejects, place_demo_pods, ready_pods,
                             set_health)

NAME = "telemetry-aware-scheduler"
CONTROL_PLANE_FILES = ["/etc/kubernetes/manifests/kube-scheduler.yaml", "/etc/kubernetes/scheduler-config.yaml"]


def fingerprint() -> dict[str, str]:
    return {f"{node}:{path}": hashlib.sha256(node_path(node, path).read_bytes()).hexdigest()
            for node in real_control_planes() for path in CONTROL_PLANE_FILES}


def own_schedulers(api_client) -> dict[str, tuple[str, int, object]]:
    """Each control plane's kube-scheduler: its pod's uid, its container's restarts and start."""
    pods = client.CoreV1Api(api_client).list_namespaced_pod("kube-system", label_selector="component=kube-scheduler").items
    return {p.spec.node_name: (p.metadata.uid, p.status.container_statuses[0].restart_count,
                               p.status.container_statuses[0].state.running.started_at) for p in pods}


@pytest.fixture(scope="module")
def second_scheduler(api_client):
    before, schedulers = fingerprint(), own_schedulers(api_client)
    assert sorted(schedulers) == sorted(real_control_planes())
    ansible_playbook("playbooks/site.yml", "-e", "scheduler_config_mode=second_scheduler",
                     "-e", "certificates_scheduler_secret_name=tas-scheduler-client")
    yield before, schedulers
    ansible_playbook("tests/incluster/second_scheduler_absent.yml")
    assert not client.AppsV1Api(api_client).list_namespaced_deployment(
        EXTENDER_NS, field_selector=f"metadata.name={NAME}").items
    # installed and removed, and the cluster's own schedulers never restarted
    assert own_schedulers(api_client) == schedulers
    assert fingerprint() == before


def test_no_file_of_any_control_plane_changed(second_scheduler):
    assert fingerprint() == second_scheduler[0]


def test_the_clusters_own_schedulers_never_restarted(api_client, second_scheduler):
    assert own_schedulers(api_client) == second_scheduler[1]


def test_it_runs_two_replicas_one_leading(api_client, second_scheduler):
    core = client.CoreV1Api(api_client)
    assert len(ready_pods(core, EXTENDER_NS, f"app.kubernetes.io/name={NAME}")) == 2
    lease = client.CoordinationV1Api(api_client).read_namespaced_lease(NAME, EXTENDER_NS)
    assert lease.spec.holder_identity.startswith(NAME), lease.spec.holder_identity


def test_a_labelled_pod_is_given_the_second_scheduler_and_a_pod_naming_another_is_not(api_client, second_scheduler):
    core = client.CoreV1Api(api_client)
    labelled = core.create_namespaced_pod(DEMO_NS, demo_pod("admission-probe"), dry_run="All")
    assert labelled.spec.scheduler_name == NAME
    other = demo_pod("admission-other")
    other.spec.scheduler_name = "someone-else"
    assert core.create_namespaced_pod(DEMO_NS, other, dry_run="All").spec.scheduler_name == "someone-else"
    plain = client.V1Pod(metadata=client.V1ObjectMeta(name="admission-plain"), spec=client.V1PodSpec(
        containers=[client.V1Container(name="app", image="registry.k8s.io/pause:3.10.2")]))
    assert core.create_namespaced_pod(DEMO_NS, plain, dry_run="All").spec.scheduler_name == "default-scheduler"


def placed_by(core: client.CoreV1Api, pod: str) -> str:
    events = core.list_namespaced_event(DEMO_NS, field_selector=f"involvedObject.name={pod},reason=Scheduled").items
    return events[0].reporting_component or events[0].source.component if events else ""


def test_pods_it_places_avoid_the_node_their_policy_rejects(api_client, second_scheduler):
    core = client.CoreV1Api(api_client)
    set_health("node-2", 1)
    names = [f"second-{uuid.uuid4().hex[:6]}" for _ in range(6)]
    try:
        wait_for(lambda: filter_rejects(core, client_tls(), "node-2"), DEADLINE, "the filter to reject node-2")
        placed = place_demo_pods(core, names, "every pod placed by the second scheduler Running")
        assert "node-2" not in placed.values(), placed
        assert {placed_by(core, n) for n in names} == {NAME}
    finally:
        for name in names:
            core.delete_namespaced_pod(name, DEMO_NS, grace_period_seconds=0)
        set_health("node-2", 0)


def test_the_other_replica_takes_over_when_the_leader_goes(api_client, second_scheduler):
    core, leases = client.CoreV1Api(api_client), client.CoordinationV1Api(api_client)
    leader = leases.read_namespaced_lease(NAME, EXTENDER_NS).spec.holder_identity
    leader_pod = next(p.metadata.name for p in ready_pods(core, EXTENDER_NS, f"app.kubernetes.io/name={NAME}")
                      if leader.startswith(p.metadata.name))
    core.delete_namespaced_pod(leader_pod, EXTENDER_NS)
    wait_for(lambda: not leases.read_namespaced_lease(NAME, EXTENDER_NS).spec.holder_identity.startswith(leader_pod),
             DEADLINE, f"another replica to take the Lease from {leader_pod}")
    name = f"after-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod(DEMO_NS, demo_pod(name))
    try:
        wait_for(lambda: core.read_namespaced_pod(name, DEMO_NS).spec.node_name, DEADLINE, f"{name} placed")
        assert placed_by(core, name) == NAME
    finally:
        core.delete_namespaced_pod(name, DEMO_NS, grace_period_seconds=0)
