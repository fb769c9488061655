"""The extender killed while pods are being scheduled (scheduler_config_ignorable: true)."""

from __future__ import annotations

import os
import signal

from provisioned import DEADLINE, EXTENDER, create_policy, health_rule, labelled, run_pods, wait_bound
from support import wait_for

PODS = 30


def test_pods_schedule_while_the_extender_is_down_and_labels_converge_after(api_client, namespace, stack, extender,
                                                                            healthy):
    policy = create_policy(api_client, namespace, {**health_rule("dontschedule"), **health_rule("deschedule")})
    stack.set_health({"node-2": 1})
    wait_for(lambda: labelled(api_client, policy) == {"node-2"}, DEADLINE, "node-2 labelled for descheduling")
    pid = stack.pid(EXTENDER)

    run_pods(api_client, namespace, policy, PODS)
    os.kill(pid, signal.SIGKILL)  # no goodbye: the Lease and the connections just vanish
    stack.set_health({"node-2": 0, "node-3": 1})  # changes the extender must catch up with

    pods = wait_bound(api_client, namespace, PODS)
    assert len(pods) == PODS, "every pod was scheduled, with or without the extender"

    wait_for(lambda: stack.running(EXTENDER) and stack.pid(EXTENDER) != pid, DEADLINE, "supervisord restarted it")
    wait_for(lambda: extender.get("/readyz").status_code == 200, DEADLINE, "the restarted extender is ready")
    wait_for(lambda: labelled(api_client, policy) == {"node-3"}, DEADLINE,
             "labels converged on the metrics that changed while it was down")
    wait_for(lambda: extender.failed(namespace, policy) == {"node-3"}, DEADLINE, "it filters on the new metrics")
