"""The extender's RBAC against what it really asked the API servers for, on the real-node cluster.

Every control plane's API server audits the requests of the collection's service accounts
(`roles/real_cluster/files/audit-policy.yaml`, Metadata level: verb, object, answer and the
authorization decision). Run after every other module of tests/incluster (conftest.py's LAST),
whose steps make the extender do everything it does (policies, labels, status, events, leader
election, load-aware mode), the log then holds every call it makes:

- none missing: no request of the extender was refused by authorization;
- none unused: every verb on every resource its roles grant (in the mode the cluster is in when
  this runs: the roles' defaults, or load-aware mode when the removal follows) was used at least
  once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from kubernetes import client

from support import real_control_planes
from support.incluster import EXTENDER_NS, node_path

ACCOUNT = "tas-extender"
USER = f"system:serviceaccount:{EXTENDER_NS}:{ACCOUNT}"


def audited_requests() -> list[dict]:
    """The extender's requests to every API server, each once (the line of its last stage)."""
    requests: dict[str, dict] = {}
    for node in real_control_planes():
        # audit.log, and the one the API server rotated out (audit-<time>.log), if any
        for path in sorted(node_path(node, "/var/log/kubernetes").glob("audit*.log")):
            for line in path.read_text().splitlines():
                event = json.loads(line)
                if event["user"]["username"] == USER:
                    requests[event["auditID"]] = event
    return list(requests.values())


def granted(api_client) -> Iterator[tuple[str, str, str, str | None, tuple[str, ...]]]:
    """(verb, apiGroup, resource[/subresource], namespace or None, resourceNames) for each
    permission the ClusterRoleBindings and RoleBindings give the extender's service account."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    bindings = [(b, None) for b in rbac.list_cluster_role_binding().items] + \
               [(b, b.metadata.namespace) for b in rbac.list_role_binding_for_all_namespaces().items]
    for binding, namespace in bindings:
        if not any(s.kind == "ServiceAccount" and s.name == ACCOUNT and s.namespace == EXTENDER_NS
                   for s in binding.subjects or []):
            continue
        role = rbac.read_cluster_role(binding.role_ref.name) if binding.role_ref.kind == "ClusterRole" else \
            rbac.read_namespaced_role(binding.role_ref.name, namespace)
        for rule in role.rules or []:
            assert not rule.non_resource_urls, f"{binding.role_ref.name}: non-resource URLs are not checked here"
            for group in rule.api_groups:
                for resource in rule.resources:
                    for verb in rule.verbs:
                        yield verb, group, resource, namespace, tuple(rule.resource_names or ())


def matches(permission: tuple[str, str, str, str | None, tuple[str, ...]], event: dict) -> bool:
    verb, group, resource, namespace, names = permission
    target = event.get("objectRef") or {}
    asked = target.get("resource", "") + (f"/{target['subresource']}" if target.get("subresource") else "")
    return (event["verb"] == verb and target.get("apiGroup", "") == group
            and (resource == "*" or resource == asked)
            and (namespace is None or target.get("namespace") == namespace)
            and (not names or target.get("name") in names))


def asked(event: dict) -> str:
    """What a request asked for: verb group/resource[/subresource] namespace/name."""
    target = event.get("objectRef") or {}
    resource = target.get("resource", "") + (f"/{target['subresource']}" if target.get("subresource") else "")
    return (f"{event['verb']} {target.get('apiGroup') or 'core'}/{resource} "
            f"{target.get('namespace', '')}/{target.get('name', '')}")


def test_every_request_of_the_extender_was_authorized():
    requests = audited_requests()
    assert len(requests) > 100, f"only {len(requests)} audited requests of {USER}: is the audit log written?"
    refused = sorted({asked(e) for e in requests
                      if (e.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid"})
    assert refused == [], f"the extender was refused what it asked for (its roles miss these): {refused}"


def test_every_permission_the_extender_is_granted_was_used(api_client):
    requests = audited_requests()
    permissions = sorted(set(granted(api_client)), key=str)
    assert permissions, f"no role bound to {USER}"
    unused = [p for p in permissions if not any(matches(p, e) for e in requests)]
    kinds = sorted({asked(e).rsplit(" ", 1)[0] for e in requests})
    assert unused == [], (f"granted to the extender and never used (verb, group, resource, namespace, names): "
                          f"{unused}; what it asked for: {kinds}")
