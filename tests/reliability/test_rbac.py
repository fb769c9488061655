"""What the extender's service account may do: read what it decides on, write labels and status.

Each case is a SubjectAccessReview, the question `kubectl auth can-i --as` asks the API server.
"""

from __future__ import annotations

import pytest
from kubernetes import client

NAMESPACE = "telemetry-aware-scheduling"
ACCOUNT = f"system:serviceaccount:{NAMESPACE}:tas-extender"
GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]

# (verb, group, resource, subresource, namespace)
ALLOWED = [
    ("list", "telemetry.intel.com", "taspolicies", "", ""),
    ("watch", "telemetry.intel.com", "taspolicies", "", ""),
    ("patch", "telemetry.intel.com", "taspolicies", "status", "default"),
    ("list", "", "nodes", "", ""),
    ("patch", "", "nodes", "", ""),
    ("watch", "", "pods", "", ""),
    ("create", "", "events", "", "default"),
    ("get", "custom.metrics.k8s.io", "nodes", "health_metric", ""),
    ("update", "coordination.k8s.io", "leases", "", NAMESPACE),
]
DENIED = [
    ("get", "", "secrets", "", NAMESPACE),
    ("list", "", "secrets", "", ""),
    ("get", "", "configmaps", "", "default"),
    ("create", "", "pods", "", "default"),
    ("delete", "", "pods", "", "default"),
    ("create", "", "pods", "eviction", "default"),
    ("delete", "", "nodes", "", ""),
    ("update", "", "nodes", "status", ""),
    ("patch", "telemetry.intel.com", "taspolicies", "", "default"),
    ("create", "telemetry.intel.com", "taspolicies", "", "default"),
    ("delete", "telemetry.intel.com", "taspolicies", "", "default"),
    ("create", "apps", "deployments", "", "default"),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", ""),
    ("impersonate", "", "serviceaccounts", "", ""),
    ("create", "", "serviceaccounts", "token", NAMESPACE),
    ("update", "coordination.k8s.io", "leases", "", "kube-system"),
    ("*", "*", "*", "", ""),
]


def allowed(api_client, verb: str, group: str, resource: str, subresource: str, namespace: str) -> bool:
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=ACCOUNT, groups=GROUPS, resource_attributes=client.V1ResourceAttributes(
            verb=verb, group=group, resource=resource, subresource=subresource or None,
            namespace=namespace or None)))
    return client.AuthorizationV1Api(api_client).create_subject_access_review(review).status.allowed


def _id(case: tuple) -> str:
    verb, group, resource, subresource, namespace = case
    return f"{verb} {resource}{'/' + subresource if subresource else ''}{'.' + group if group else ''}" \
           f"{' -n ' + namespace if namespace else ''}"


@pytest.mark.parametrize("case", ALLOWED, ids=_id)
def test_the_extender_may(api_client, stack, case):
    assert allowed(api_client, *case)


@pytest.mark.parametrize("case", DENIED, ids=_id)
def test_the_extender_may_not(api_client, stack, case):
    assert not allowed(api_client, *case)
