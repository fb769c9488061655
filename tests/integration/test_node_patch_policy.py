"""The extender role's RBAC and node-patch admission policy, as Ansible renders them, on the local
cluster's real API server: with the extender's credentials a request may add the extended resource
to a node's capacity (or replace a 0), with the configured quantity, and change nothing else in a
node's status.

The real-node suite checks the rest of the policy (labels, annotations, spec) on the installed
collection (tests/incluster/test_in_cluster.py); this one needs no installed extender, so it runs
where `make integration` runs. The objects are applied for a service account of a namespace of the
test's own and deleted afterwards.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, config, utils
from kubernetes.utils import parse_quantity

from support import REPO, wait_for
from support.controller import DEADLINE, refuse_a_provisioned_extender
from support.render import rendered as render

ROLE = REPO / "collections/ansible_collections/intel/tas/roles/extender"
POLICY = "tas-extender-node-patches"
RESOURCE, POINTER = "telemetry/scheduling", "telemetry~1scheduling"


def rendered(templates: list[str], values: dict) -> list[dict]:
    """The objects of the role's templates, rendered by Ansible with the role's defaults and vars."""
    expression = ("{{ " + " + ".join(f"(lookup('ansible.builtin.template', role_dir ~ '/templates/{t}')"
                                      " | from_yaml_all | list)" for t in templates) + " }}")
    return [d for d in render(ROLE, expression, values) if d]


def _delete(api_client, obj: dict) -> None:
    dynamic = {
        "ClusterRole": lambda n: client.RbacAuthorizationV1Api(api_client).delete_cluster_role(n),
        "ClusterRoleBinding": lambda n: client.RbacAuthorizationV1Api(api_client).delete_cluster_role_binding(n),
        "ValidatingAdmissionPolicy":
            lambda n: client.AdmissionregistrationV1Api(api_client).delete_validating_admission_policy(n),
        "ValidatingAdmissionPolicyBinding":
            lambda n: client.AdmissionregistrationV1Api(api_client).delete_validating_admission_policy_binding(n),
    }
    delete = dynamic.get(obj["kind"])
    if delete is None:
        return  # namespaced: they go with the namespace
    try:
        delete(obj["metadata"]["name"])
    except client.ApiException as error:
        if error.status != 404:
            raise


@pytest.fixture(scope="module")
def as_extender(api_client, kubeconfig) -> Iterator[client.CoreV1Api]:
    """The API as the extender's service account (the admin impersonating it), under the RBAC and
    the admission policy the role renders with its defaults."""
    refuse_a_provisioned_extender(api_client)
    namespace = f"tas-vap-{os.getpid()}-{time.monotonic_ns() % 10**8}"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    objects = [o for o in rendered(["rbac.yaml.j2", "node-patch-policy.yaml.j2"], {"extender_namespace": namespace})
               if o["kind"] != "Namespace"]
    api = config.new_client_from_config(config_file=kubeconfig)
    api.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:tas-extender")
    try:
        for obj in objects:
            _delete(api_client, obj)  # an earlier run's, if it was stopped before its clean-up
            utils.create_from_dict(api_client, obj)
        yield client.CoreV1Api(api)
    finally:
        api.close()
        for obj in objects:
            _delete(api_client, obj)
        core.delete_namespace(namespace)


@pytest.fixture
def node(api_client) -> Iterator[str]:
    """A node without the resource, deleted afterwards."""
    core = client.CoreV1Api(api_client)
    name = f"vap-{uuid.uuid4().hex[:6]}"
    base = {"cpu": "4", "pods": "110"}
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name),
                                   status=client.V1NodeStatus(capacity=base, allocatable=base)))
    yield name
    core.delete_node(name)


def _refused_by_the_policy(patch) -> str:
    with pytest.raises(client.ApiException) as refused:
        patch()
    assert refused.value.status == 403 and POLICY in refused.value.body, refused.value.body
    return json.loads(refused.value.body)["message"]


@pytest.fixture
def in_force(as_extender, node) -> client.CoreV1Api:
    """Once the API server enforces the policy (it takes effect a moment after it is created),
    asked with a dry run, which admission sees and nothing stores."""
    other = [{"op": "add", "path": "/status/capacity/example.com~1other", "value": "1"}]

    def refused() -> bool:
        try:
            as_extender.patch_node_status(node, other, dry_run="All")
        except client.ApiException as error:
            return error.status == 403 and POLICY in error.body
        return False

    wait_for(refused, DEADLINE, "the node-patch policy in force")
    return as_extender


def test_the_extenders_credentials_add_the_resource_where_a_node_lacks_it(api_client, in_force, node):
    changed = in_force.patch_node_status(node, [{"op": "add", "path": f"/status/capacity/{POINTER}", "value": "1000"}])
    assert parse_quantity(changed.status.capacity[RESOURCE]) == 1000
    assert RESOURCE not in changed.status.allocatable  # the kubelet's to copy, not the extender's


def test_the_extenders_credentials_replace_a_zero(api_client, in_force, node):
    client.CoreV1Api(api_client).patch_node_status(node, [{"op": "add", "path": f"/status/capacity/{POINTER}",
                                                           "value": "0"}])
    changed = in_force.patch_node_status(node, [{"op": "add", "path": f"/status/capacity/{POINTER}", "value": "1000"}])
    assert parse_quantity(changed.status.capacity[RESOURCE]) == 1000


# What stolen extender credentials would try on a node's status; RBAC allows each (patch on
# nodes/status), the policy not.
REFUSED = {
    "another quantity": ([{"op": "add", "path": f"/status/capacity/{POINTER}", "value": "5"}], "telemetry/scheduling"),
    "another resource": ([{"op": "add", "path": "/status/capacity/example.com~1gpu", "value": "1"}],
                         "example.com/gpu"),
    "a built-in resource": ([{"op": "replace", "path": "/status/capacity/cpu", "value": "64"}], "cpu"),
    "the allocatable": ([{"op": "add", "path": f"/status/allocatable/{POINTER}", "value": "1000"}], "allocatable"),
    "a condition": ([{"op": "add", "path": "/status/conditions", "value": [
        {"type": "Ready", "status": "False", "reason": "Taken", "message": "taken"}]}], "conditions"),
}


@pytest.mark.parametrize(("patch", "named"), REFUSED.values(), ids=REFUSED.keys())
def test_the_extenders_credentials_change_nothing_else_in_a_nodes_status(api_client, in_force, node, patch, named):
    before = client.CoreV1Api(api_client).read_node(node).status
    message = _refused_by_the_policy(lambda: in_force.patch_node_status(node, patch))
    assert message.endswith(f"not {named}"), message  # the policy names what it refused
    after = client.CoreV1Api(api_client).read_node(node).status
    assert (after.capacity, after.allocatable) == (before.capacity, before.allocatable)
    assert not [c for c in after.conditions or [] if c.reason == "Taken"]


@pytest.mark.parametrize("patch", [
    [{"op": "replace", "path": f"/status/capacity/{POINTER}", "value": "2000"}],
    [{"op": "remove", "path": f"/status/capacity/{POINTER}"}],
], ids=["changed", "removed"])
def test_the_extenders_credentials_leave_a_value_the_node_has(api_client, in_force, node, patch):
    client.CoreV1Api(api_client).patch_node_status(node, [{"op": "add", "path": f"/status/capacity/{POINTER}",
                                                           "value": "7"}])
    _refused_by_the_policy(lambda: in_force.patch_node_status(node, patch))
    assert client.CoreV1Api(api_client).read_node(node).status.capacity[RESOURCE] == "7"


def test_the_extenders_credentials_still_label_nodes_as_before(api_client, in_force, node):
    """The controller's label patch (reconcile.label_patch) goes through the same policy."""
    changed = in_force.patch_node(node, {"metadata": {
        "labels": {"tas-test-policy": "violating"},
        "annotations": {"telemetry.intel.com/managed-labels": "tas-test-policy"}}})
    assert changed.metadata.labels["tas-test-policy"] == "violating"
