"""Node labels that are not the controller's to set, against the real API server: a policy name
too long for a label key is refused at apply; a user's label is never overwritten; a policy of the
same name in another namespace sets no label while the older one exists."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from support import wait_for
from support.controller import DEADLINE, DESCHEDULE_AND_LABEL, GROUP, PLURAL, VERSION, create_policy, node_labels


def test_a_policy_name_longer_than_a_label_key_is_refused_at_apply(api_client, crd, namespace):
    with pytest.raises(client.ApiException) as caught:
        create_policy(client.CustomObjectsApi(api_client), namespace, "p" * 64, DESCHEDULE_AND_LABEL)
    assert caught.value.status == 422
    assert "metadata.name is too long" in caught.value.body and "63" in caught.value.body


def _condition(custom, namespace: str, name: str, kind: str) -> dict | None:
    status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), None)


def test_a_users_label_and_another_namespaces_policy_are_never_overwritten(api_client, extender, namespace):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    name = f"own-{uuid.uuid4().hex[:6]}"
    other_namespace = f"{namespace}-z"  # sorts after: owns nothing even if created in the same second
    core.patch_node("node-1", {"metadata": {"labels": {name: "mine"}}})
    try:
        extender.set({"node-1": 2, "node-2": 2, "node-3": 0})
        create_policy(custom, namespace, name, DESCHEDULE_AND_LABEL)
        wait_for(lambda: node_labels(core)["node-2"].get(name) == "violating", DEADLINE, "node-2 labelled violating")
        condition = wait_for(lambda: _condition(custom, namespace, name, "LabelsNotSet"), DEADLINE,
                             "the policy says which label it did not set")
        assert condition["reason"] == "LabelNotOurs" and f"node-1 already has label {name}=mine" in condition["message"]
        assert node_labels(core)["node-1"][name] == "mine"
        events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        assert any(e.reason == "LabelNotOurs" and e.type == "Warning" for e in events)

        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other_namespace)))
        create_policy(custom, other_namespace, name, DESCHEDULE_AND_LABEL)
        taken = wait_for(lambda: _condition(custom, other_namespace, name, "LabelsNotSet"), DEADLINE,
                         "the younger same-named policy says which policy owns its labels")
        assert taken["reason"] == "NameTaken" and f"{namespace}/{name}" in taken["message"]

        # The older policy goes: the other takes its labels over, and still leaves the user's.
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        wait_for(lambda: (c := _condition(custom, other_namespace, name, "LabelsNotSet")) and c["reason"] == "LabelNotOurs",
                 DEADLINE, "the remaining policy owns the labels")
        labels = node_labels(core)
        assert labels["node-2"][name] == "violating" and labels["node-1"][name] == "mine"

        custom.delete_namespaced_custom_object(GROUP, VERSION, other_namespace, PLURAL, name)
        wait_for(lambda: name not in node_labels(core)["node-2"], DEADLINE, "labels removed with the last policy")
        assert node_labels(core)["node-1"][name] == "mine"
    finally:
        core.patch_node("node-1", {"metadata": {"labels": {name: None}}})
        try:
            core.delete_namespace(other_namespace)
        except client.ApiException as error:
            if error.status != 404:
                raise
