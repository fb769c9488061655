"""Audit mode's reports on pods: what a policy in audit mode would have filtered, as pod Events.

A policy annotated `telemetry.intel.com/enforcement: audit` is decided as usual and enforced
nowhere (see decision.enforced); the filter call reports what it would have done here. Events
are created by one thread of their own from a bounded queue: a scheduler request never waits on
the API server, and a full queue drops Events rather than hold requests up.
"""

from __future__ import annotations

import datetime
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any, Protocol

from tas_extender.decide.policy import Policy

log = logging.getLogger(__name__)

REASON = "TASPolicyAudit"
MESSAGE_BYTES = 1024  # Kubernetes cuts an Event's message at 1 KiB


def _entry(policy: Policy, node: str, reason: str) -> str:
    return f"{node} ({reason.removeprefix(f'{policy.name}: ')})"


def listing(policy: Policy, failed: Mapping[str, str], shown: int) -> str:
    """`node-a (dontschedule rule ...), node-b (...)` for the first `shown` nodes, then how many more."""
    text = ", ".join(_entry(policy, node, reason) for node, reason in islice(failed.items(), shown))
    return text + (f" ... and {len(failed) - shown} more" if len(failed) > shown else "")


def message(policy: Policy, failed: Mapping[str, str], total: int, limit: int = MESSAGE_BYTES) -> str:
    """The Event's message: what the policy would have filtered, at most `limit` bytes long."""
    head = f"policy {policy.key} is in audit mode: it would have filtered"
    if not failed:
        return f"{head} none of {total} node(s)"
    head = f"{head} {len(failed)} of {total} node(s): "
    reserve = len(f" ... and {len(failed)} more")
    entries: list[str] = []
    size = len(head.encode())
    # As many nodes as fit, in the order the scheduler sent them; the rest are counted.
    for index, (node, reason) in enumerate(failed.items()):
        entry = _entry(policy, node, reason)
        cost = len(entry.encode()) + (2 if entries else 0)
        if size + cost + (reserve if index + 1 < len(failed) else 0) > limit:
            break
        entries.append(entry)
        size += cost
    if not entries:  # the first reason alone is too long (a policy of many long rules): cut it
        tail = f"... and {len(failed) - 1} more" if len(failed) > 1 else "..."
        cut = (head + _entry(policy, *next(iter(failed.items())))).encode()[:limit - len(tail)]
        return cut.decode(errors="ignore") + tail
    rest = len(failed) - len(entries)
    return head + ", ".join(entries) + (f" ... and {rest} more" if rest else "")


class EventsApi(Protocol):
    """The one call of the Kubernetes client's CoreV1Api that PodEvents makes."""

    def create_namespaced_event(self, namespace: str, body: Any) -> object: ...


@dataclass(frozen=True)
class _Pending:
    marker: tuple[str, str, int]  # pod uid (or namespace/name), policy key, policy generation
    namespace: str
    name: str
    uid: str
    message: str  # written when queued: at most MESSAGE_BYTES, however many nodes failed


class PodEvents:
    """One Normal Event `TASPolicyAudit` per pod, policy and policy generation.

    Called by the filter request (`__call__` only queues); `start` runs the thread that creates
    the Events. Which (pod, policy, generation) were reported is remembered in a bounded set, so
    a pod the scheduler retries is reported once.
    """

    def __init__(self, core: EventsApi, queue_size: int = 1000, remembered: int = 10000):
        self._core = core
        self._queue: queue.Queue[_Pending] = queue.Queue(queue_size)
        self._remembered = remembered
        self._reported: OrderedDict[tuple[str, str, int], None] = OrderedDict()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._overflowing = False
        self.dropped = 0  # Events not created because the queue was full

    def __call__(self, pod: Mapping[str, Any], policy: Policy, failed: Mapping[str, str], total: int) -> None:
        """Queue the Event for `pod` (its metadata, as the scheduler sent it) unless already reported."""
        name, namespace, uid = pod.get("name"), pod.get("namespace") or "default", pod.get("uid")
        if not isinstance(name, str) or not name or not isinstance(namespace, str):
            return  # nothing to attach an Event to
        uid = uid if isinstance(uid, str) else ""
        marker = (uid or f"{namespace}/{name}", policy.key, policy.generation)
        with self._lock:
            if marker in self._reported:
                return
            self._reported[marker] = None
            if len(self._reported) > self._remembered:
                self._reported.popitem(last=False)
            try:
                self._queue.put_nowait(_Pending(marker, namespace, name, uid, message(policy, failed, total)))
            except queue.Full:
                del self._reported[marker]  # a later attempt of the pod may report it
                self.dropped += 1
                if not self._overflowing:
                    log.warning("audit: %d pod Events are waiting to be created; dropping new ones until "
                                "there is room", self._queue.maxsize)
                self._overflowing = True
                return
            if self._overflowing:
                log.info("audit: pod Events are queued again; %d were dropped so far", self.dropped)
                self._overflowing = False

    def _create(self, pending: _Pending) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"generateName": f"{pending.name}.", "namespace": pending.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pending.name,
                               "namespace": pending.namespace, **({"uid": pending.uid} if pending.uid else {})},
            "reason": REASON, "type": "Normal",
            "message": pending.message,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "source": {"component": "tas-extender"},
        }
        try:
            self._core.create_namespaced_event(pending.namespace, body)
        except Exception as error:  # noqa: BLE001 - an API error must not end the thread
            log.warning("audit: recording the Event on pod %s/%s: %s", pending.namespace, pending.name,
                        getattr(error, "reason", None) or error)
            with self._lock:  # a later attempt of the pod may report it
                self._reported.pop(pending.marker, None)

    def drain(self) -> int:
        """Create every queued Event now, in this thread; how many were taken off the queue."""
        count = 0
        while True:
            try:
                pending = self._queue.get_nowait()
            except queue.Empty:
                return count
            self._create(pending)
            count += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pending = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            self._create(pending)

    def start(self) -> None:
        threading.Thread(target=self._run, name="audit-events", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
