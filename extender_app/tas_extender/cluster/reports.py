"""What kube-scheduler and the descheduler report in their Events, counted as our metrics.

Neither tells us directly. A scheduler that cannot call the extender's filter (a wrong
certificate or address, the extender unreachable or answering an error) says so only in the
pod's FailedScheduling Event and its own log; the descheduler says in an EvictionFailed Event
that a run stopped at one of its eviction caps (the role's policy turns those Events on). The
controller watches these two kinds of Event, selected by the API server (reason, reporting
component), and this module counts them: the scheduler's for an alert, the descheduler's for the
dashboard (its last Event of a run can be lost when the CronJob's process exits, docs/extender.md).
The descheduler's Events of evicted pods also say how many pods one run took off one node: the
run is the CronJob's pod, which each Event names as its reporting instance, so a run stopped at
its per-node cap shows as that many evictions from one node.

An Event is counted once, with the repeats its series records later. Events already there when
the watch lists them count only when they happened within RECENT_SECONDS: a replica that starts
after an outage reports the failures of the outage, not those of an hour ago. Every replica
counts the same Events; the alert rules take the max.
"""

from __future__ import annotations

import collections
import datetime
import re
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter

from tas_extender.decide.decision import NOT_DECIDED

# The filter verb's path: in every failed call's message (`Post "https://.../scheduler/filter":
# dial tcp ...` or `failed filter with extender at URL https://.../scheduler/filter, code 400`).
FILTER_PATH = "/scheduler/filter"
SCHEDULER_FIELDS = "reason=FailedScheduling"
# The descheduler's reporting controller (sigs.k8s.io/descheduler pkg/utils/events.go).
DESCHEDULER_FIELDS = "reportingComponent=sigs.k8s.io.descheduler"
# "... failed: node eviction limit exceeded (5)" and the total and namespace caps' alike
CAP = re.compile(r"\b(total|node|namespace) eviction limit exceeded")
# "pod eviction from node-1 node by sigs.k8s.io/descheduler", the note of each evicted pod's Event
EVICTED_FROM = re.compile(r"\bpod eviction from (\S+) node\b")
RECENT_SECONDS = 300
# How far back the busiest run is looked for: longer than a run, and than an alert's `for`
RUNS_WINDOW_SECONDS = 600


def _count(event: Any) -> int:
    """How many times the Event happened: its series' count where it has one."""
    series = event.series.count if event.series is not None and event.series.count else 0
    return max(series, event.count or 0, 1)


def _last_seen(event: Any) -> datetime.datetime | None:
    for when in (event.series.last_observed_time if event.series is not None else None,
                 event.last_timestamp, event.event_time, event.metadata.creation_timestamp):
        if when is not None:
            return when
    return None


def scheduler_call_failed(event: Any) -> str | None:
    """The scheduler's name when a FailedScheduling Event says its call to our filter failed."""
    message = event.message or ""
    if FILTER_PATH not in message and not message.startswith(NOT_DECIDED):
        return None
    return event.reporting_component or (event.source.component if event.source else None) or "unknown"


def descheduler_result(event: Any) -> str | None:
    """`evicted`, `cap_<which>` (a run stopped at that cap) or `failed`, for the descheduler's Events."""
    if event.type == "Normal":
        return "evicted"
    cap = CAP.search(event.message or "")
    return f"cap_{cap.group(1)}" if cap else "failed"


class EventCounts:
    """Counts Events of one kind into `counter`, labelled by what `classify` makes of each."""

    def __init__(self, counter: Counter, classify: Callable[[Any], str | None],
                 now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)) -> None:
        self.counter, self.classify, self.now = counter, classify, now
        self._counted: dict[str, int] = {}  # uid -> how many of its repeats are counted
        self._lock = threading.Lock()

    def _add(self, event: Any, recent_only: bool) -> None:
        label = self.classify(event)
        if label is None:
            return
        uid, count = event.metadata.uid, _count(event)
        with self._lock:
            counted = self._counted.get(uid)
            self._counted[uid] = count
        if counted is None and recent_only:
            seen = _last_seen(event)
            if seen is None or (self.now() - seen).total_seconds() > RECENT_SECONDS:
                return
            counted = 0
        new = count - (counted or 0)
        if new > 0:
            self.counter.labels(label).inc(new)

    def on_list(self, items: list[Any]) -> None:
        for event in items:
            self._add(event, recent_only=True)

    def on_event(self, kind: str, event: Any) -> None:
        if kind == "DELETED":
            with self._lock:
                self._counted.pop(event.metadata.uid, None)
            return
        self._add(event, recent_only=False)


class RunEvictions:
    """The descheduler's evicted pods by run and node, from the Events of the last
    RUNS_WINDOW_SECONDS: `busiest()` is the most pods one run evicted from one node."""

    def __init__(self, now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)) -> None:
        self.now = now
        self._evicted: dict[str, tuple[str, str, datetime.datetime]] = {}  # uid -> (run, node, when)
        self._lock = threading.Lock()

    def _add(self, event: Any) -> None:
        where = EVICTED_FROM.search(event.message or "")
        when = _last_seen(event)
        if event.type != "Normal" or where is None or not event.reporting_instance or when is None:
            return
        if (self.now() - when).total_seconds() > RUNS_WINDOW_SECONDS:
            return
        with self._lock:
            self._evicted[event.metadata.uid] = (event.reporting_instance, where.group(1), when)

    def on_list(self, items: list[Any]) -> None:
        for event in items:
            self._add(event)

    def on_event(self, kind: str, event: Any) -> None:
        if kind == "DELETED":
            with self._lock:
                self._evicted.pop(event.metadata.uid, None)
            return
        self._add(event)

    def busiest(self) -> int:
        since = self.now() - datetime.timedelta(seconds=RUNS_WINDOW_SECONDS)
        with self._lock:
            for uid in [uid for uid, (_, _, when) in self._evicted.items() if when < since]:
                del self._evicted[uid]
            counts = collections.Counter((run, node) for run, node, _ in self._evicted.values())
        return max(counts.values(), default=0)
