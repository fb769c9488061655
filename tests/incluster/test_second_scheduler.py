"""scheduler_config_mode: second_scheduler on the real-node cluster seen as a managed one: a
kube-scheduler of the cluster's version as a Deployment, the extender behind its profile, pods
sent to it by the MutatingAdmissionPolicy on their policy label, no file of any control-plane
node touched.

Marked `managed`: these need the install of inventory/real-managed (the example inventory of a
managed cluster, no control plane in it), which molecule's realnode scenario makes after its
first uninstall, with the demo, before removing it again (molecule/realnode/verify.yml):
`pytest -m managed tests/incluster`. The scenario hashes kubeadm's files before anything is
installed ($TAS_KUBEADM_FILES) and records the cluster's own kube-schedulers before the managed
install ($TAS_OWN_SCHEDULERS).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pathlib
import ssl
import uuid

import pytest
from kubernetes import client

from conftest import EXTENDER_NS
from file_hashes import differences, hashes
from support import REAL_CLUSTER_DIR, real_control_planes, recorded_own_schedulers, running_own_schedulers, wait_for
from test_in_cluster import (DEADLINE, DEMO_NS, demo_pod, filter_rejects, place_demo_pods, ready_pods,
                             set_health)

pytestmark = pytest.mark.managed

NAME = "telemetry-aware-scheduler"
CLIENT_SECRET = "tas-scheduler-client"


@pytest.fixture(scope="module")
def second_scheduler(api_client):
    installed = client.AppsV1Api(api_client).list_namespaced_deployment(
        EXTENDER_NS, field_selector=f"metadata.name={NAME}").items
    assert installed, ("no second scheduler in the cluster: these checks need "
                       "`ansible-playbook -i inventory/real-managed playbooks/site.yml` on a cluster without TAS "
                       "(molecule realnode runs it after its first uninstall)")
    return installed[0]


@pytest.mark.parametrize("node", real_control_planes())
def test_no_file_of_any_control_plane_changed(second_scheduler, node):
    snapshot = json.loads(pathlib.Path(os.environ["TAS_KUBEADM_FILES"]).read_text())
    directory = REAL_CLUSTER_DIR / "nodes" / node / "fs" / "etc-kubernetes"
    assert snapshot.get(str(directory)), f"the snapshot of kubeadm's files has nothing for {directory}"
    assert differences(snapshot[str(directory)], hashes(directory)) == []


def test_the_clusters_own_schedulers_never_restarted(api_client, second_scheduler):
    recorded = recorded_own_schedulers()
    assert sorted(recorded) == sorted(real_control_planes())
    assert running_own_schedulers(api_client) == recorded


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


@pytest.fixture(scope="module")
def second_scheduler_tls(api_client, tmp_path_factory) -> ssl.SSLContext:
    """The client pair the second scheduler's pods mount (its Secret; on a managed cluster the CA
    is on the machine Ansible ran from, not on a control plane), as they present it."""
    data = client.CoreV1Api(api_client).read_namespaced_secret(CLIENT_SECRET, EXTENDER_NS).data
    directory = tmp_path_factory.mktemp("scheduler-client")
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (directory / key).write_bytes(base64.b64decode(data[key]))
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    context.check_hostname = False  # the extender is reached by pod IP
    context.load_cert_chain(str(directory / "tls.crt"), str(directory / "tls.key"))
    return context


def test_pods_it_places_avoid_the_node_their_policy_rejects(api_client, second_scheduler, second_scheduler_tls):
    core = client.CoreV1Api(api_client)
    set_health("node-2", 1)
    names = [f"second-{uuid.uuid4().hex[:6]}" for _ in range(6)]
    try:
        wait_for(lambda: filter_rejects(core, second_scheduler_tls, "node-2"), DEADLINE, "the filter to reject node-2")
        placed = place_demo_pods(core, names, "every pod placed by the second scheduler Running")
        assert "node-2" not in placed.values(), placed
        assert {placed_by(core, n) for n in names} == {NAME}
    finally:
        for name in names:
            with contextlib.suppress(client.exceptions.NotFoundException):  # not created: failed before
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
