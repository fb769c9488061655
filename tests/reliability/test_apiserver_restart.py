"""kube-apiserver restarted under the controller: watches resume, labels stay right, no patch storm."""

from __future__ import annotations

import time

from kubernetes import client

from provisioned import DEADLINE, create_policy, health_rule, labelled
from support import get_raw, wait_for

PATCHES = "tas_extender_node_label_patches_total"


def test_labels_survive_an_api_server_restart_without_extra_patches(api_client, namespace, stack, extender, healthy):
    policy = create_policy(api_client, namespace, health_rule("deschedule"))
    stack.set_health({"node-2": 1})
    wait_for(lambda: labelled(api_client, policy) == {"node-2"}, DEADLINE, "node-2 labelled for descheduling")
    time.sleep(5)  # let the label patch's own watch event settle before counting
    before = extender.metric(PATCHES)

    stack.supervisorctl("restart", "kube-apiserver")
    wait_for(lambda: get_raw(api_client, "/readyz") == b"ok", DEADLINE, "the API server is ready again")
    # Several sync periods with the watches resumed: nothing changed, so nothing is patched.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        assert labelled(api_client, policy) == {"node-2"}, "a label was lost or added across the restart"
        time.sleep(1)
    assert extender.metric(PATCHES) == before, "patches were sent although no label had to change"

    # The watches work: a metric change still moves the label, with one patch per node.
    stack.set_health({"node-2": 0, "node-3": 1})
    wait_for(lambda: labelled(api_client, policy) == {"node-3"}, DEADLINE, "the label moved to node-3")
    time.sleep(5)
    assert extender.metric(PATCHES) == before + 2

    # And the policy watch too: deleting the policy removes its label.
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        "telemetry.intel.com", "v1alpha1", namespace, "taspolicies", policy)
    wait_for(lambda: labelled(api_client, policy) == set(), DEADLINE, "the deleted policy's label is gone")
