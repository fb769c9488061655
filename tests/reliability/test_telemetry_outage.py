"""Prometheus, then prometheus-adapter, stopped under the running extender, then started again.

The extender must keep answering the scheduler within its timeout, let the metrics age out so
the missing-metric policy (fail-open) applies, say that the source is down, and decide from
fresh metrics again once the pipeline is back, without a restart.
"""

from __future__ import annotations

from provisioned import ADAPTER, DEADLINE, EXTENDER, PROMETHEUS, create_policy, health_rule
from support import wait_for

# The local inventory's extender: sync every 2 s, metrics older than max(3 syncs, 30 s) missing.
AGE_OUT = 30


def test_scheduling_decisions_survive_a_metrics_outage(api_client, namespace, stack, extender, healthy):
    policy = create_policy(api_client, namespace, health_rule("dontschedule"))
    stack.set_health({"node-2": 1})
    wait_for(lambda: extender.failed(namespace, policy) == {"node-2"}, DEADLINE, "node-2 filtered on its metric")
    pid = stack.pid(EXTENDER)

    stack.supervisorctl("stop", PROMETHEUS)
    try:
        # Every call is answered (the client's timeout is the scheduler's), for the whole outage.
        wait_for(lambda: extender.failed(namespace, policy) == set(), AGE_OUT + DEADLINE,
                 "the stale metric aged out and fail-open let node-2 through", interval=1)
        assert extender.post("prioritize", namespace, policy).status_code == 200

        stack.supervisorctl("stop", ADAPTER)
        wait_for(lambda: extender.metric("tas_extender_metric_source_up") == 0, DEADLINE,
                 "/metrics says the source is down")
        ready = extender.get("/readyz")
        assert ready.status_code == 200, "a source outage must not take the extender out of service"
        assert "down" in " ".join(ready.json().get("degraded", [])), ready.text
        for verb in ("filter", "prioritize"):
            assert extender.post(verb, namespace, policy).status_code == 200
        assert extender.failed(namespace, policy) == set()
    finally:
        stack.supervisorctl("start", ADAPTER, check=False)
        stack.supervisorctl("start", PROMETHEUS, check=False)

    wait_for(lambda: extender.failed(namespace, policy) == {"node-2"}, DEADLINE * 2,
             "decisions follow the metric again once Prometheus and the adapter are back", interval=1)
    wait_for(lambda: extender.metric("tas_extender_metric_source_up") == 1, DEADLINE, "/metrics says the source is up")
    assert "degraded" not in extender.get("/readyz").json()
    assert stack.pid(EXTENDER) == pid, "the extender recovered without a restart"
