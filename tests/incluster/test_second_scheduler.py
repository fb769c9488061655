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
import time
import uuid

import pytest
import yaml
from file_hashes import differences, hashes
from kubernetes import client
from support import (REAL_CLUSTER_DIR, real_control_planes, record_figure, recorded_own_schedulers, running_own_schedulers,
                     wait_for)
from support.incluster import (DEADLINE, DEMO_NS, EXTENDER_NS, active_alerts, ansible_playbook, create_demo_pod,
                               demo_pod, filter_rejects, place_demo_pods, ready_pods, set_health)

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


def test_with_the_admission_policy_off_a_labelled_pod_keeps_the_default_scheduler(api_client, second_scheduler):
    """scheduler_config_admission_policy=false: the role takes its MutatingAdmissionPolicy and
    binding away, and the label alone no longer sends a pod to the second scheduler (the pod must
    name it); turned on again, the label is enough again."""
    core, admission = client.CoreV1Api(api_client), client.AdmissionregistrationV1Api(api_client)
    policy = f"tas-{NAME}"

    def given_to(name: str) -> str:
        return core.create_namespaced_pod(DEMO_NS, demo_pod(name), dry_run="All").spec.scheduler_name

    def policies() -> list[str]:
        return [p.metadata.name for p in admission.list_mutating_admission_policy().items]

    ansible_playbook("playbooks/site.yml", "--tags", "scheduler_config", "-e", "scheduler_config_admission_policy=false",
                     inventory="real-managed")
    try:
        assert policy not in policies()
        assert policy not in [b.metadata.name for b in admission.list_mutating_admission_policy_binding().items]
        # the API server drops a deleted policy from its informer shortly after
        wait_for(lambda: given_to("admission-off") == "default-scheduler", DEADLINE,
                 "a labelled pod to keep the default scheduler")
    finally:
        ansible_playbook("playbooks/site.yml", "--tags", "scheduler_config", inventory="real-managed")
    assert policy in policies()
    wait_for(lambda: given_to("admission-on") == NAME, DEADLINE, "a labelled pod to be given the second scheduler again")


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


def test_while_the_extender_is_down_its_pods_wait_and_then_avoid_the_rejected_node(
        api_client, second_scheduler, second_scheduler_tls):
    """The safe default holds in this mode: its profile's extender is not ignorable (the second
    scheduler places only pods that name it, never the extender's own), so with every extender
    replica gone the pods sent to it wait, each told why, rather than land where their policy
    forbids; they are placed once the extender is back."""
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    config = yaml.safe_load(core.read_namespaced_config_map(NAME, EXTENDER_NS).data["config.yaml"])
    assert [e["ignorable"] for e in config["extenders"]] == [False], config["extenders"]
    set_health("node-2", 1)
    names = [f"outage-{uuid.uuid4().hex[:6]}" for _ in range(4)]
    replicas = apps.read_namespaced_deployment("tas-extender", EXTENDER_NS).spec.replicas
    try:
        wait_for(lambda: filter_rejects(core, second_scheduler_tls, "node-2"), DEADLINE, "the filter to reject node-2")
        apps.patch_namespaced_deployment_scale("tas-extender", EXTENDER_NS, {"spec": {"replicas": 0}})
        wait_for(lambda: not core.list_namespaced_pod(EXTENDER_NS, label_selector="app.kubernetes.io/name=tas-extender")
                 .items, DEADLINE, "every extender pod gone")
        for name in names:
            create_demo_pod(core, name)
        wait_for(lambda: all(failed_scheduling(core, n) for n in names), DEADLINE,
                 "the second scheduler to report each pod unschedulable while the extender is down")
        assert not any(core.read_namespaced_pod(n, DEMO_NS).spec.node_name for n in names)
        apps.patch_namespaced_deployment_scale("tas-extender", EXTENDER_NS, {"spec": {"replicas": replicas}})
        wait_for(lambda: all(core.read_namespaced_pod(n, DEMO_NS).status.phase == "Running" for n in names),
                 DEADLINE, "every pod placed once the extender is back")
        placed = {n: core.read_namespaced_pod(n, DEMO_NS).spec.node_name for n in names}
        assert "node-2" not in placed.values(), placed
        assert {placed_by(core, n) for n in names} == {NAME}
        # the replicas back count the scheduler's failed calls of the last minutes: the alert says so
        wait_for(lambda: {"scheduler": NAME, "severity": "critical"}.items()
                 <= next(iter(active_alerts(core, "TASSchedulerCannotCallExtender")), {}).items(),
                 DEADLINE, f"TASSchedulerCannotCallExtender for {NAME}")
    finally:
        apps.patch_namespaced_deployment_scale("tas-extender", EXTENDER_NS, {"spec": {"replicas": replicas}})
        for name in names:
            with contextlib.suppress(client.exceptions.NotFoundException):  # not created: failed before
                core.delete_namespaced_pod(name, DEMO_NS, grace_period_seconds=0)
        set_health("node-2", 0)
    wait_for(lambda: len(ready_pods(core, EXTENDER_NS, "app.kubernetes.io/name=tas-extender")) == replicas,
             DEADLINE, "every extender replica Ready again")


def failed_scheduling(core: client.CoreV1Api, pod: str) -> bool:
    """Whether the second scheduler reported the pod unschedulable (a FailedScheduling event)."""
    events = core.list_namespaced_event(DEMO_NS, field_selector=f"involvedObject.name={pod},reason=FailedScheduling")
    return any((e.reporting_component or e.source.component) == NAME for e in events.items)


def test_the_other_replica_takes_over_when_the_leader_goes(api_client, second_scheduler):
    core, leases = client.CoreV1Api(api_client), client.CoordinationV1Api(api_client)
    leader = leases.read_namespaced_lease(NAME, EXTENDER_NS).spec.holder_identity
    leader_pod = next(p.metadata.name for p in ready_pods(core, EXTENDER_NS, f"app.kubernetes.io/name={NAME}")
                      if leader.startswith(p.metadata.name))
    started = time.monotonic()
    core.delete_namespaced_pod(leader_pod, EXTENDER_NS)
    wait_for(lambda: not leases.read_namespaced_lease(NAME, EXTENDER_NS).spec.holder_identity.startswith(leader_pod),
             DEADLINE, f"another replica to take the Lease from {leader_pod}")
    taken_over = time.monotonic() - started
    name = f"after-{uuid.uuid4().hex[:6]}"
    create_demo_pod(core, name)
    try:
        wait_for(lambda: core.read_namespaced_pod(name, DEMO_NS).spec.node_name, DEADLINE, f"{name} placed")
        assert placed_by(core, name) == NAME
        record_figure(f"second scheduler: leader {leader_pod} deleted, Lease taken by another replica after "
                      f"{taken_over:.1f} s, a new policy pod placed by it {time.monotonic() - started:.1f} s after the delete")
    finally:
        core.delete_namespaced_pod(name, DEMO_NS, grace_period_seconds=0)
