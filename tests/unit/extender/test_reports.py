"""The Events of kube-scheduler and the descheduler that the extender counts (reports.py).

The messages are the ones kube-scheduler v1.36 and descheduler v0.36 write (pkg/scheduler/
extender.go and schedule_one.go; pkg/descheduler/evictions/evictions.go). That the API server
selects them by these fields, that the real components write them and that the counts raise the
alerts is shown on the real-node cluster (tests/incluster: the descheduler cap test, and the
second scheduler's safe-default test).
"""

from __future__ import annotations

import datetime

import pytest
from kubernetes import client, watch
from prometheus_client import CollectorRegistry, Counter, generate_latest

from tas_extender.cluster import reports
from tas_extender.decide.decision import NOT_DECIDED
from tas_extender.cluster.controller import Controller
from tas_extender.decide.telemetry import DESCHEDULER_RESULTS, Telemetry

NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
URL = "https://tas-extender.tas-system.svc:9001/scheduler"


def event(uid: str = "u1", reason: str = "FailedScheduling", message: str = "", kind: str = "Warning",
          component: str | None = "default-scheduler", count: int | None = None,
          series: int | None = None, seconds_ago: float = 0, instance: str | None = None) -> client.CoreV1Event:
    when = NOW - datetime.timedelta(seconds=seconds_ago)
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(uid=uid, creation_timestamp=when),
        involved_object=client.V1ObjectReference(kind="Pod", name="demo"), reason=reason, message=message,
        type=kind, reporting_component=component, reporting_instance=instance, count=count, event_time=when,
        series=client.CoreV1EventSeries(count=series, last_observed_time=when) if series else None)


def counts(classify) -> tuple[reports.EventCounts, CollectorRegistry]:
    """EventCounts on a counter `c` of its own registry, which `value` reads."""
    registry = CollectorRegistry()
    counter = Counter("c", "c", ["label"], registry=registry)
    return reports.EventCounts(counter, classify, now=lambda: NOW), registry


def value(registry: CollectorRegistry, label: str) -> float | None:
    """The count of `label`, as a scrape of the registry reads it."""
    return registry.get_sample_value("c_total", {"label": label})


@pytest.mark.parametrize("message", [
    f'Post "{URL}/filter": dial tcp 10.96.0.12:9001: connect: connection refused',
    f'Post "{URL}/filter": tls: failed to verify certificate: x509: certificate signed by unknown authority',
    f"failed filter with extender at URL {URL}/filter, code 400",
    NOT_DECIDED,
])
def test_a_failed_call_to_our_filter_counts_for_the_scheduler_that_made_it(message):
    assert reports.scheduler_call_failed(event(message=message, component="telemetry-aware-scheduler")) == \
        "telemetry-aware-scheduler"


def test_the_older_source_field_names_the_scheduler_when_there_is_no_reporting_component():
    old = event(message=f"failed filter with extender at URL {URL}/filter, code 500", component=None)
    old.source = client.V1EventSource(component="default-scheduler")
    assert reports.scheduler_call_failed(old) == "default-scheduler"


@pytest.mark.parametrize("message", [
    "0/5 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 4 node(s) had untolerated taint.",
    "0/5 nodes are available: 3 Insufficient cpu. preemption: 0/5 nodes are available.",
    "skip schedule deleting pod: default/demo",
])
def test_a_pod_that_fits_nowhere_is_not_a_failed_call(message):
    assert reports.scheduler_call_failed(event(message=message)) is None


DESCHEDULER = [
    ("Normal", "pod eviction from node-1 node by sigs.k8s.io/descheduler", "evicted"),
    ("Warning", "pod eviction from node-1 node by sigs.k8s.io/descheduler failed: node eviction limit exceeded (5)",
     "cap_node"),
    ("Warning", "pod eviction from node-1 node by sigs.k8s.io/descheduler failed: total eviction limit exceeded (20)",
     "cap_total"),
    ("Warning", "pod eviction from node-1 node by sigs.k8s.io/descheduler failed: namespace eviction limit "
                "exceeded (10)", "cap_namespace"),
    ("Warning", "pod eviction from node-1 node by sigs.k8s.io/descheduler failed: Cannot evict pod as it would "
                "violate the pod's disruption budget.", "failed"),
]


@pytest.mark.parametrize(("kind", "message", "result"), DESCHEDULER)
def test_the_descheduler_events_are_told_apart(kind, message, result):
    assert reports.descheduler_result(event(reason="RemovePodsViolatingNodeAffinity", kind=kind,
                                            message=message, component="sigs.k8s.io.descheduler")) == result


def test_every_result_the_descheduler_events_get_is_a_series_from_the_start():
    results = {reports.descheduler_result(event(kind=kind, message=message)) for kind, message, _ in DESCHEDULER}
    assert results == set(DESCHEDULER_RESULTS)
    exposed = generate_latest(Telemetry().registry).decode()
    for result in DESCHEDULER_RESULTS:
        assert f'tas_extender_descheduler_evictions_total{{result="{result}"}} 0.0' in exposed


FAILED = f'Post "{URL}/filter": dial tcp: connection refused'


def test_a_new_event_counts_once_and_its_repeats_count_as_they_come():
    counted, registry = counts(reports.scheduler_call_failed)
    counted.on_event("ADDED", event(message=FAILED))
    assert value(registry, "default-scheduler") == 1
    counted.on_event("MODIFIED", event(message=FAILED, series=4))
    assert value(registry, "default-scheduler") == 4
    counted.on_event("MODIFIED", event(message=FAILED, series=4))  # another field changed
    assert value(registry, "default-scheduler") == 4


def test_listed_events_count_only_when_recent():
    counted, registry = counts(reports.scheduler_call_failed)
    counted.on_list([event("old", message=FAILED, count=7, seconds_ago=reports.RECENT_SECONDS + 60),
                     event("new", message=FAILED, count=2, seconds_ago=30)])
    assert value(registry, "default-scheduler") == 2
    # the old one's later repeats count from where it was
    counted.on_event("MODIFIED", event("old", message=FAILED, count=9))
    assert value(registry, "default-scheduler") == 4


def test_a_list_again_after_the_watch_expired_counts_nothing_twice():
    counted, registry = counts(reports.scheduler_call_failed)
    counted.on_event("ADDED", event(message=FAILED, count=3))
    counted.on_list([event(message=FAILED, count=3)])
    assert value(registry, "default-scheduler") == 3


def test_a_deleted_event_is_forgotten_and_others_are_not_counted():
    counted, registry = counts(reports.scheduler_call_failed)
    counted.on_event("ADDED", event(message="0/3 nodes are available: 3 Insufficient memory."))
    counted.on_event("ADDED", event("u2", message=FAILED))
    counted.on_event("DELETED", event("u2", message=FAILED))
    assert counted._counted == {}
    assert value(registry, "default-scheduler") == 1


@pytest.mark.parametrize("method", ["list_scheduler_events", "list_descheduler_events"])
def test_the_watches_decode_core_events(method):
    """The watch finds the type to decode into from the list function's return annotation."""
    assert watch.Watch().get_return_type(getattr(Controller, method)) == "CoreV1Event"


def evicted(uid: str, run: str, node: str, seconds_ago: float = 0, kind: str = "Normal") -> client.CoreV1Event:
    """An evicted pod's Event as descheduler v0.36 writes it: the run's pod in its reporting instance."""
    note = f"pod eviction from {node} node by sigs.k8s.io/descheduler"
    return event(uid, reason="RemovePodsViolatingNodeAffinity", kind=kind, component="sigs.k8s.io.descheduler",
                 message=note if kind == "Normal" else note + " failed: node eviction limit exceeded (5)",
                 instance=f"sigs.k8s.io.descheduler-{run}", seconds_ago=seconds_ago)


def test_the_busiest_run_is_the_most_pods_one_run_evicted_from_one_node():
    runs = reports.RunEvictions(now=lambda: NOW)
    assert runs.busiest() == 0
    runs.on_list([evicted(f"a{i}", "tas-descheduler-1-x", "node-1", seconds_ago=120) for i in range(3)])
    for i in range(5):
        runs.on_event("ADDED", evicted(f"b{i}", "tas-descheduler-2-y", "node-1"))
    for i in range(4):
        runs.on_event("ADDED", evicted(f"c{i}", "tas-descheduler-2-y", "node-2"))
    # the run's refusals at the cap are not evictions, and a repeat of an Event is the same pod
    runs.on_event("ADDED", evicted("d", "tas-descheduler-2-y", "node-1", kind="Warning"))
    runs.on_event("MODIFIED", evicted("b0", "tas-descheduler-2-y", "node-1"))
    assert runs.busiest() == 5
    runs.on_event("DELETED", evicted("b4", "tas-descheduler-2-y", "node-1"))
    assert runs.busiest() == 4


def test_runs_older_than_the_window_no_longer_count():
    now = [NOW]
    runs = reports.RunEvictions(now=lambda: now[0])
    runs.on_list([evicted(f"a{i}", "tas-descheduler-1-x", "node-1") for i in range(5)])
    runs.on_event("ADDED", evicted("b", "tas-descheduler-2-y", "node-1"))
    assert runs.busiest() == 5
    now[0] = NOW + datetime.timedelta(seconds=reports.RUNS_WINDOW_SECONDS + 1)
    assert runs.busiest() == 0


def test_an_event_older_than_the_window_is_not_kept():
    runs = reports.RunEvictions(now=lambda: NOW)
    runs.on_list([evicted("a", "tas-descheduler-1-x", "node-1", seconds_ago=reports.RUNS_WINDOW_SECONDS + 5)])
    assert runs._evicted == {} and runs.busiest() == 0


def test_an_event_without_its_run_or_node_is_not_counted():
    runs = reports.RunEvictions(now=lambda: NOW)
    runs.on_event("ADDED", event("x", kind="Normal", message="pod eviction from node-1 node by sigs.k8s.io/descheduler"))
    runs.on_event("ADDED", event("y", kind="Normal", message="evicted", instance="sigs.k8s.io.descheduler-r"))
    assert runs.busiest() == 0


def test_the_busiest_run_is_exposed_from_zero():
    exposed = generate_latest(Telemetry().registry).decode()
    assert "tas_extender_descheduler_busiest_run_evictions 0.0" in exposed
