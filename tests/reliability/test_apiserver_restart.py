"""kube-apiserver restarted under the controller: watches resume, labels stay right, no patch storm."""

from __future__ import annotations

import time

from kubernetes import client

from provisioned import DEADLINE, create_policy, health_rule, labelled
from support import get_raw, wait_for

PATCHES = "tas_extender_node_label_patches_total"
QUIET_SECONDS = 5


def settled(read):
    """The value once it has not changed for QUIET_SECONDS (a patch's watch event may still be in flight)."""
    value, since = read(), time.monotonic()
    deadline = since + DEADLINE
    while time.monotonic() - since < QUIET_SECONDS:
        assert time.monotonic() < deadline, f"the value kept changing for {DEADLINE} s (last {value})"
        time.sleep(0.5)
        if (current := read()) != value:
            value, since = current, time.monotonic()
    return value


def test_labels_survive_an_api_server_restart_without_extra_patches(api_client, namespace, stack, extender, healthy):
    policy = create_policy(api_client, namespace, health_rule("deschedule"))
    stack.set_health({"node-2": 1})
    wait_for(lambda: labelled(api_client, policy) == {"node-2"}, DEADLINE, "node-2 labelled for descheduling")
    before = settled(lambda: extender.metric(PATCHES))

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
    assert settled(lambda: extender.metric(PATCHES)) == before + 2

    # And the policy watch too: deleting the policy removes its label.
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        "telemetry.intel.com", "v1alpha1", namespace, "taspolicies", policy)
    wait_for(lambda: labelled(api_client, policy) == set(), DEADLINE, "the deleted policy's label is gone")
