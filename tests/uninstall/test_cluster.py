"""After playbooks/uninstall.yml, nothing of telemetry-aware scheduling is left in the cluster,
and the cluster still schedules pods.

Run by both molecule scenarios right after their uninstall: the KWOK cluster, where everything
ran as host services, and the real-node cluster, where the roles' defaults ran it in pods. The
cluster is the one KUBECONFIG names.
"""

from __future__ import annotations

import json
import os

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from support import get_raw, wait_for

NAMESPACES = ["telemetry-aware-scheduling", "custom-metrics", "monitoring", "health-metric-demo"]
LOAD_ANNOTATIONS = {"cpu_usage_avg_5m", "cpu_usage_max_avg_1h", "cpu_usage_max_avg_1d", "mem_usage_avg_5m",
                    "mem_usage_max_avg_1h", "mem_usage_max_avg_1d", "node_hot_value"}


def absent(read) -> bool:
    try:
        read()
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def test_no_crd_apiservice_or_namespace_of_ours(api_client):
    extensions = client.ApiextensionsV1Api(api_client)
    registration = client.ApiregistrationV1Api(api_client)
    core = client.CoreV1Api(api_client)
    assert absent(lambda: extensions.read_custom_resource_definition("taspolicies.telemetry.intel.com"))
    assert absent(lambda: registration.read_api_service("v1beta1.custom.metrics.k8s.io"))
    left = [name for name in NAMESPACES if not absent(lambda name=name: core.read_namespace(name))]
    assert left == []


def test_no_dashboard_given_to_grafana_is_left_anywhere(api_client):
    """The prometheus role's ConfigMap for Grafana's dashboard sidecar, wherever it went (the
    realnode scenario's Grafana stand-in's namespace stays: it is not ours)."""
    left = client.CoreV1Api(api_client).list_config_map_for_all_namespaces(
        label_selector="app.kubernetes.io/name=tas-extender-dashboard").items
    assert [(c.metadata.namespace, c.metadata.name) for c in left] == []


def test_no_admission_policy_of_ours(api_client):
    # the extender's node-patch policy and the second scheduler's mutating one, with their bindings
    group = json.loads(get_raw(api_client, "/apis/admissionregistration.k8s.io/v1"))
    kinds = [r["name"] for r in group["resources"]
             if "admissionpolicies" in r["name"] or "admissionpolicybindings" in r["name"]]
    assert "validatingadmissionpolicies" in kinds
    left = [f"{kind}/{item['metadata']['name']}" for kind in kinds if "/" not in kind
            for item in json.loads(get_raw(api_client, f"/apis/admissionregistration.k8s.io/v1/{kind}"))["items"]
            if item["metadata"]["name"].startswith("tas-")]
    assert left == []


def test_no_cluster_wide_rbac_of_ours(api_client):
    """The extender's, the adapter's and the certificate renewal's (tas-certificate-renewal)."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    ours = ("tas-", "prometheus-adapter")
    roles = [r.metadata.name for r in rbac.list_cluster_role().items if r.metadata.name.startswith(ours)]
    bindings = [b.metadata.name for b in rbac.list_cluster_role_binding().items if b.metadata.name.startswith(ours)]
    assert (roles, bindings) == ([], [])


def test_nothing_of_ours_in_kube_system(api_client):
    """The descheduler's CronJob, the certificate renewal's CronJob (its Jobs and pods gone with it)
    and service account, and what either runs with."""
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    apps, rbac = client.AppsV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    left = ([f"CronJob/{c.metadata.name}" for c in batch.list_namespaced_cron_job("kube-system").items]
            + [f"Job/{j.metadata.name}" for j in batch.list_namespaced_job("kube-system").items]
            + [f"DaemonSet/{d.metadata.name}" for d in apps.list_namespaced_daemon_set("kube-system").items]
            + [f"Pod/{p.metadata.name}" for p in core.list_namespaced_pod(
                "kube-system", label_selector="app.kubernetes.io/name=tas-certificate-renewal").items]
            + [f"ConfigMap/{c.metadata.name}" for c in core.list_namespaced_config_map("kube-system").items]
            + [f"ServiceAccount/{s.metadata.name}" for s in core.list_namespaced_service_account("kube-system").items]
            + [f"RoleBinding/{b.metadata.name}" for b in rbac.list_namespaced_role_binding("kube-system").items])
    assert [name for name in left if "tas-" in name] == []


def test_nodes_carry_no_label_annotation_or_resource_of_ours(api_client):
    """molecule/uninstall.yml gave node-1 (or $TAS_UNINSTALL_NODE) the extender's label `stale-policy` (listed in its
    managed-labels annotation) and a hot value before the uninstall, as a crashed extender leaves them."""
    found = []
    for node in client.CoreV1Api(api_client).list_node().items:
        labels = node.metadata.labels or {}
        annotations = node.metadata.annotations or {}
        found += [f"{node.metadata.name} label {key}" for key in labels
                  if key.startswith("telemetry.aware.scheduling.") or key in ("demo-policy", "stale-policy")]
        found += [f"{node.metadata.name} annotation {key}" for key in annotations
                  if key.startswith("telemetry.intel.com/") or key in LOAD_ANNOTATIONS]
        found += [f"{node.metadata.name} capacity {key}" for key in (node.status.capacity or {})
                  if key.startswith("telemetry/")]
    assert found == []


def test_the_users_own_labels_and_annotations_stay(api_client):
    node = client.CoreV1Api(api_client).read_node(os.environ.get("TAS_UNINSTALL_NODE", "node-1"))
    assert (node.metadata.labels or {}).get("example.com/owner") == "platform"
    assert (node.metadata.annotations or {}).get("example.com/note") == "keep me"


@pytest.fixture
def plain_pod(api_client, namespace) -> str:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="after-uninstall"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="pause", image="registry.k8s.io/pause:3.10.2")],
                              termination_grace_period_seconds=0),
    )
    client.CoreV1Api(api_client).create_namespaced_pod(namespace, pod)
    return namespace


def test_the_scheduler_still_places_pods(api_client, plain_pod):
    core = client.CoreV1Api(api_client)
    node = wait_for(lambda: core.read_namespaced_pod("after-uninstall", plain_pod).spec.node_name, 120,
                    "the pod created after the uninstall to be bound to a node")
    assert node
