"""The collection on the cluster shape a platform team runs: several control planes behind one API
endpoint, each with its own kube-scheduler static pod, and Ansible logging in over SSH as a
user who may sudo. Every scheduler must reach the extender with a certificate of the one CA,
whichever of them leads.

Runs on the real-node cluster after site.yml and the health-metric demo (molecule scenario
realnode), as test_in_cluster.py does.
"""

from __future__ import annotations

import uuid

from cryptography import x509
from kubernetes import client

from support import real_cluster, real_control_planes, wait_for
from support.incluster import (DEADLINE, DEMO_NS, client_tls, filter_calls, filter_rejects, node_path, place_demo_pods,
                               run_ansible, set_health)

CONTROL_PLANES = real_control_planes()
MANIFEST = "/etc/kubernetes/manifests/kube-scheduler.yaml"
# Where a stopped scheduler's manifest waits: outside the directory the kubelet watches.
PARKED = "/etc/kubernetes/kube-scheduler.yaml.parked-by-test"



def ansible(*args: str) -> str:
    """An ad-hoc Ansible command against the real-node cluster's inventory; its output."""
    return run_ansible("ansible", *args).stdout


def scheduler_leader(coordination: client.CoordinationV1Api) -> str:
    """The node whose kube-scheduler holds the lease (its identity is `<hostname>_<uuid>`)."""
    lease = coordination.read_namespaced_lease("kube-scheduler", "kube-system")
    return (lease.spec.holder_identity or "").rsplit("_", 1)[0]


def schedulers_running(core: client.CoreV1Api, nodes: list[str]) -> bool:
    pods = {p.spec.node_name: p for p in core.list_namespaced_pod(
        "kube-system", label_selector="component=kube-scheduler").items}
    return all(node in pods and pods[node].status.phase == "Running"
               and all(c.ready for c in pods[node].status.container_statuses or []) for node in nodes)


def test_the_cluster_has_several_control_planes_behind_one_endpoint(api_client):
    core = client.CoreV1Api(api_client)
    description = real_cluster()
    assert len(CONTROL_PLANES) >= 3, CONTROL_PLANES
    labelled = sorted(n.metadata.name for n in core.list_node(
        label_selector="node-role.kubernetes.io/control-plane").items)
    assert labelled == sorted(CONTROL_PLANES)
    # each runs its own etcd member, API server and scheduler
    for component in ("etcd", "kube-apiserver", "kube-scheduler"):
        pods = core.list_namespaced_pod("kube-system", label_selector=f"component={component}").items
        assert sorted(p.spec.node_name for p in pods) == sorted(CONTROL_PLANES), component
    # one endpoint in front: what this machine, the nodes and kubeadm's files all use
    endpoint = f"https://{description['api_endpoint']}"
    assert api_client.configuration.host == endpoint
    for node in CONTROL_PLANES:
        assert f"server: {endpoint}\n" in node_path(node, "/etc/kubernetes/admin.conf").read_text()


def test_every_control_plane_holds_a_client_pair_of_the_one_ca():
    """One CA per cluster: made once, copied to every control plane (not one CA each, which would
    leave all but one scheduler unable to reach the extender)."""
    cas = {node: node_path(node, "/etc/tas/pki/ca.crt").read_bytes() for node in CONTROL_PLANES}
    assert len(set(cas.values())) == 1, f"control planes hold different CAs: {sorted(cas)}"
    ca = x509.load_pem_x509_certificate(next(iter(cas.values())))
    for node in CONTROL_PLANES:
        cert = x509.load_pem_x509_certificate(node_path(node, "/etc/tas/pki/kube-scheduler/scheduler-client.crt").read_bytes())
        cert.verify_directly_issued_by(ca)


def test_ansible_logs_in_over_ssh_as_the_admin_user_and_becomes_root_with_sudo():
    user = real_cluster()["ssh"]["user"]
    # raw: a command over the login alone, no Python on the node involved
    plain = ansible("all", "-m", "ansible.builtin.raw", "-a", "id -un")
    as_root = ansible("all", "-b", "-m", "ansible.builtin.raw", "-a", "id -un")
    hostnames = ansible("all", "-m", "ansible.builtin.raw", "-a", "hostname")
    nodes = [n["name"] for n in real_cluster()["nodes"]]
    for node in nodes:
        assert f"{node} | CHANGED | rc=0 >>\n{user}\n" in plain, plain
        assert f"{node} | CHANGED | rc=0 >>\nroot\n" in as_root, as_root
        # each login lands in that node's own namespaces
        assert f"{node} | CHANGED | rc=0 >>\n{node}\n" in hostnames, hostnames


def test_each_control_planes_scheduler_when_it_leads_places_policy_pods_as_the_policy_says(
        api_client, healthy_nodes_after):
    """Each control plane's kube-scheduler leads in turn, the others stopped (the kubelet stops a
    static pod whose manifest leaves its directory and starts it again when it comes back), and
    places policy pods through the extender off the node the policy rejects."""
    core = client.CoreV1Api(api_client)
    coordination = client.CoordinationV1Api(api_client)
    tls = client_tls()
    set_health("node-2", 2)
    wait_for(lambda: filter_rejects(core, tls, "node-2"), DEADLINE, "every extender replica to reject node-2")
    parked: set[str] = set()

    def park(node: str) -> None:
        node_path(node, MANIFEST).rename(node_path(node, PARKED))
        parked.add(node)

    def unpark(node: str) -> None:
        node_path(node, PARKED).rename(node_path(node, MANIFEST))
        parked.discard(node)

    try:
        # one scheduler started and one stopped per turn: the next in line comes back, then the
        # one that led goes
        for leader in CONTROL_PLANES:
            if leader in parked:
                unpark(leader)
            for node in CONTROL_PLANES:
                if node != leader and node not in parked:
                    park(node)
            wait_for(lambda: scheduler_leader(coordination) == leader, DEADLINE,
                     f"{leader}'s kube-scheduler to hold the lease once the others stopped")
            before = filter_calls(core, tls)
            names = [f"ha-{leader}-{uuid.uuid4().hex[:4]}" for _ in range(3)]
            try:
                placed = place_demo_pods(core, names, f"the pods {leader}'s scheduler places to run")
                assert "node-2" not in placed.values(), (leader, placed)
                assert filter_calls(core, tls) >= before + len(names), f"{leader}'s scheduler did not call the extender"
                assert scheduler_leader(coordination) == leader
            finally:
                for name in names:
                    core.delete_namespaced_pod(name, DEMO_NS, grace_period_seconds=0)
    finally:
        for node in list(parked):
            unpark(node)
        wait_for(lambda: schedulers_running(core, CONTROL_PLANES), DEADLINE,
                 "every control plane's kube-scheduler to run again")
