"""What the extender's service account may do: read what it decides on, write labels, status and
the extended resource in the nodes' capacity.

Each case is a SubjectAccessReview, the question `kubectl auth can-i --as` asks the API server.
"""

from __future__ import annotations

import pytest

from provisioned import EXTENDER_NAMESPACE as NAMESPACE
from provisioned import extender_may as allowed

# (verb, group, resource, subresource, namespace[, name])
ALLOWED = [
    ("list", "telemetry.intel.com", "taspolicies", "", ""),
    ("watch", "telemetry.intel.com", "taspolicies", "", ""),
    ("patch", "telemetry.intel.com", "taspolicies", "status", "default"),
    ("list", "", "nodes", "", ""),
    ("patch", "", "nodes", "", ""),
    # the extended resource advertised in their capacity (cluster/advertise.py)
    ("patch", "", "nodes", "status", ""),
    ("create", "", "events", "", "default"),
    # the schedulers' and the descheduler's Events, counted (reports.py)
    ("list", "", "events", "", ""),
    ("watch", "", "events", "", ""),
    ("get", "custom.metrics.k8s.io", "nodes", "health_metric", ""),
    ("update", "coordination.k8s.io", "leases", "", NAMESPACE, "tas-extender"),
    ("create", "coordination.k8s.io", "leases", "", NAMESPACE),
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
    # what it does not use: pods (load-aware mode only), the status but by patch, another Lease,
    # a single policy or node (it lists and watches them), a list of node metrics
    ("watch", "", "pods", "", ""),
    ("get", "telemetry.intel.com", "taspolicies", "", "default"),
    ("get", "", "nodes", "", ""),
    ("get", "", "events", "", "default"),
    ("patch", "", "events", "", "default"),
    ("list", "custom.metrics.k8s.io", "nodes", "", ""),
    ("get", "telemetry.intel.com", "taspolicies", "status", "default"),
    ("update", "telemetry.intel.com", "taspolicies", "status", "default"),
    ("update", "coordination.k8s.io", "leases", "", NAMESPACE, "another-lease"),
    ("*", "*", "*", "", ""),
]


def _id(case: tuple) -> str:
    verb, group, resource, subresource, namespace, *name = case
    return f"{verb} {resource}{'/' + subresource if subresource else ''}{'.' + group if group else ''}" \
           f"{' ' + name[0] if name else ''}{' -n ' + namespace if namespace else ''}"


@pytest.mark.parametrize("case", ALLOWED, ids=_id)
def test_the_extender_may(api_client, stack, case):
    assert allowed(api_client, *case)


@pytest.mark.parametrize("case", DENIED, ids=_id)
def test_the_extender_may_not(api_client, stack, case):
    assert not allowed(api_client, *case)
