"""A descheduler run started when a node starts violating (cluster/descheduler_runs.py): which
(policy, node) pairs the descheduler acts on, and across sync rounds when the leader starts a run:
once per new violation, after a run under way, never while the CronJob is suspended or missing,
and at least MIN_INTERVAL apart. The CronJob itself is a stand-in here that records what was asked
(the API side, CronJobRuns, runs against the real-node cluster in tests/incluster)."""

from __future__ import annotations

import logging

import pytest

from tas_extender.cluster.descheduler_runs import LOOK_AGAIN, DeschedulerRuns, RunState, violations
from tas_extender.decide.engine import Engine
from tas_extender.decide.metrics import Snapshot
from tas_extender.decide.policy import parse_policy
from tas_extender.decide.telemetry import Telemetry

NODES = {"node-1", "node-2", "node-3"}
A, B = "default/a", "default/b"


def _policy(name: str, namespace: str = "default", audit: bool = False, deschedule: bool = True,
            created: str = "2026-01-01T00:00:00Z") -> object:
    rules = [{"metricname": "health_metric", "operator": "Equals", "target": 2}]
    strategies = {"deschedule" if deschedule else "dontschedule": {"rules": rules}}
    annotations = {"telemetry.intel.com/enforcement": "audit"} if audit else {}
    return parse_policy({"apiVersion": "telemetry.intel.com/v1alpha1", "kind": "TASPolicy",
                         "metadata": {"name": name, "namespace": namespace, "annotations": annotations,
                                      "creationTimestamp": created},
                         "spec": {"strategies": strategies}})


def test_the_descheduler_acts_on_enforced_deschedule_rules_of_the_policy_that_sets_the_labels():
    policies = [_policy("a"), _policy("audited", audit=True), _policy("filters", deschedule=False),
                _policy("a", namespace="later", created="2026-02-01T00:00:00Z")]
    values = {"node-1": 2.0, "node-2": 0.0, "node-3": 2.0}
    engine = Engine.offline(policies, Snapshot({"health_metric": values}, set(values)), NODES)
    assert violations(engine.view, policies, NODES) == {(A, "node-1"), (A, "node-3")}
    assert violations(engine.view, policies, {"node-1"}) == {(A, "node-1")}


class _CronJob:
    """The descheduler's CronJob as the rounds find it, and the runs started of it."""

    namespace, name = "kube-system", "tas-descheduler"

    def __init__(self):
        self.state_now = RunState.READY
        self.started: list[str] = []
        self.reasons: list[str] = []
        self.failing: Exception | None = None
        self.asked = 0

    def state(self):
        self.asked += 1
        if self.failing is not None:
            raise self.failing
        return self.state_now, {"metadata": {"uid": "u"}}

    def start(self, cron_job, reason: str) -> str:
        self.reasons.append(reason)
        self.started.append(f"tas-descheduler-now-{len(self.started)}")
        return self.started[-1]


class _Rounds:
    def __init__(self):
        self.now: frozenset[tuple[str, str]] = frozenset()

    def set(self, *pairs: tuple[str, str]) -> None:
        self.now = frozenset(pairs)

    def __call__(self, nodes) -> frozenset[tuple[str, str]]:
        return frozenset(pair for pair in self.now if pair[1] in nodes)


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def runs():
    rounds, cron_job, clock, telemetry = _Rounds(), _CronJob(), _Clock(), Telemetry()
    trigger = DeschedulerRuns(rounds, cron_job, telemetry.descheduler_runs, clock=clock, min_interval=20.0)
    return trigger, rounds, cron_job, clock, telemetry


def _counts(telemetry: Telemetry) -> dict[str, float]:
    return {result: telemetry.registry.get_sample_value("tas_extender_descheduler_runs_total", {"result": result})
            for result in ("started", "failed")}


def test_a_node_that_starts_violating_gets_one_run_and_a_violation_that_stays_none(runs, caplog):
    trigger, rounds, cron_job, clock, telemetry = runs
    assert trigger.sync(NODES, leader=True) is None
    rounds.set((A, "node-2"))
    with caplog.at_level(logging.INFO, logger="tas_extender.cluster.descheduler_runs"):
        assert trigger.sync(NODES, leader=True) == "tas-descheduler-now-0"
    assert [r.getMessage() for r in caplog.records] == [
        "node-2 violates default/a: started the descheduler run kube-system/tas-descheduler-now-0"]
    for _ in range(3):
        clock.now += 60
        assert trigger.sync(NODES, leader=True) is None
    assert _counts(telemetry) == {"started": 1, "failed": 0}


def test_the_first_round_has_nothing_to_compare_with_and_starts_nothing(runs):
    trigger, rounds, cron_job, _, _ = runs
    rounds.set((A, "node-1"))
    assert trigger.sync(NODES, leader=True) is None
    assert cron_job.asked == 0


def test_a_replica_that_does_not_lead_follows_the_rounds_and_starts_nothing(runs):
    trigger, rounds, cron_job, _, _ = runs
    trigger.sync(NODES, leader=False)
    rounds.set((A, "node-1"))
    assert trigger.sync(NODES, leader=False) is None
    assert cron_job.asked == 0
    # leading from the next round: node-1 violated before it, and still does: no run
    assert trigger.sync(NODES, leader=True) is None


def test_a_violation_that_ends_before_the_run_could_start_needs_none(runs):
    trigger, rounds, cron_job, _, _ = runs
    cron_job.state_now = RunState.BUSY
    trigger.sync(NODES, leader=True)
    rounds.set((A, "node-1"))
    assert trigger.sync(NODES, leader=True) is None
    rounds.set()
    cron_job.state_now = RunState.READY
    assert trigger.sync(NODES, leader=True) is None and cron_job.started == []


def test_while_a_run_is_under_way_a_new_violation_waits_for_it_and_then_gets_one_run(runs):
    trigger, rounds, cron_job, clock, _ = runs
    trigger.sync(NODES, leader=True)
    cron_job.state_now = RunState.BUSY  # a scheduled run, which may have listed the nodes before the label
    rounds.set((A, "node-1"))
    assert trigger.sync(NODES, leader=True) is None
    rounds.set((A, "node-1"), (B, "node-3"))
    assert trigger.sync(NODES, leader=True) is None
    cron_job.state_now = RunState.READY
    clock.now += 5
    assert trigger.sync(NODES, leader=True) == "tas-descheduler-now-0"
    assert trigger.sync(NODES, leader=True) is None and len(cron_job.started) == 1


def test_runs_started_here_are_at_least_the_interval_apart(runs):
    trigger, rounds, cron_job, clock, _ = runs
    trigger.sync(NODES, leader=True)
    rounds.set((A, "node-1"))
    assert trigger.sync(NODES, leader=True) == "tas-descheduler-now-0"
    clock.now += 5
    rounds.set((A, "node-1"), (A, "node-2"))
    assert trigger.sync(NODES, leader=True) is None  # 5 s after the last
    clock.now += 10
    assert trigger.sync(NODES, leader=True) is None  # 15 s
    clock.now += 5
    assert trigger.sync(NODES, leader=True) == "tas-descheduler-now-1"  # 20 s: node-2 waited for it
    assert cron_job.reasons == ["node-1 violates default/a", "node-2 violates default/a"]


def test_a_suspended_cron_job_gets_no_run_and_what_was_seen_meanwhile_is_dropped(runs, caplog):
    trigger, rounds, cron_job, clock, _ = runs
    trigger.sync(NODES, leader=True)
    cron_job.state_now = RunState.SUSPENDED
    rounds.set((A, "node-1"))
    with caplog.at_level(logging.INFO, logger="tas_extender.cluster.descheduler_runs"):
        assert trigger.sync(NODES, leader=True) is None
    assert [r.getMessage() for r in caplog.records] == [
        "CronJob kube-system/tas-descheduler is suspended: no descheduler run for node-1 violates default/a"]
    cron_job.state_now = RunState.READY  # resumed: its schedule covers node-1
    clock.now += 60
    assert trigger.sync(NODES, leader=True) is None and cron_job.started == []


def test_a_missing_cron_job_starts_nothing_and_is_looked_for_again_later(runs):
    trigger, rounds, cron_job, clock, _ = runs
    trigger.sync(NODES, leader=True)
    cron_job.state_now = RunState.MISSING
    rounds.set((A, "node-1"))
    assert trigger.sync(NODES, leader=True) is None
    asked = cron_job.asked
    cron_job.state_now = RunState.READY
    rounds.set((A, "node-1"), (A, "node-2"))
    clock.now += LOOK_AGAIN - 1
    assert trigger.sync(NODES, leader=True) is None and cron_job.asked == asked
    clock.now += 1
    assert trigger.sync(NODES, leader=True) == "tas-descheduler-now-0"


def test_a_failed_start_is_counted_logged_and_tried_again_next_round(runs, caplog):
    trigger, rounds, cron_job, clock, telemetry = runs
    trigger.sync(NODES, leader=True)
    cron_job.failing = OSError("connection refused")
    rounds.set((A, "node-1"))
    with caplog.at_level(logging.WARNING, logger="tas_extender.cluster.descheduler_runs"):
        assert trigger.sync(NODES, leader=True) is None
    assert [r.getMessage() for r in caplog.records] == [
        "starting a run of CronJob kube-system/tas-descheduler failed (connection refused); trying again next sync round"]
    cron_job.failing = None
    clock.now += 2
    assert trigger.sync(NODES, leader=True) == "tas-descheduler-now-0"
    assert _counts(telemetry) == {"started": 1, "failed": 1}


def test_a_refused_start_is_tried_again_after_the_interval_not_every_round(runs, caplog):
    """An admission policy's refusal (403, or 422 where kube-apiserver lost the policy's parameter)
    does not change from one sync round to the next: one warning per interval, not per round."""
    from kubernetes.client.rest import ApiException

    trigger, rounds, cron_job, clock, telemetry = runs
    trigger.sync(NODES, leader=True)
    cron_job.failing = ApiException(status=422, reason="Unprocessable Entity")
    rounds.set((A, "node-1"))
    with caplog.at_level(logging.WARNING, logger="tas_extender.cluster.descheduler_runs"):
        assert trigger.sync(NODES, leader=True) is None
        clock.now += 2
        assert trigger.sync(NODES, leader=True) is None
    assert len(caplog.records) == 1 and "was refused" in caplog.records[0].getMessage()
    assert "trying again in 20 s" in caplog.records[0].getMessage()
    assert cron_job.asked == 1
    cron_job.failing = None
    clock.now += 20
    assert trigger.sync(NODES, leader=True) == "tas-descheduler-now-0"
    assert _counts(telemetry) == {"started": 1, "failed": 1}
