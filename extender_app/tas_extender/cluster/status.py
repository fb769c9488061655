"""The writer of what the controller reports on a TASPolicy: its status and its Warning Events.

It is told what to report (reconcile.py computes it) and writes it when it changed, or when the
last write is older than STATUS_REFRESH_SECONDS; each Event once per policy generation and message.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from tas_extender.cluster.reconcile import (
    labels_not_set_condition,
    valid_condition,
    violating_condition,
    warning_condition,
    with_transitions,
)
from tas_extender.decide.policy import GROUP, KIND, PLURAL, VERSION, Policy, PolicyError

log = logging.getLogger("tas_extender.cluster.controller")  # the controller's log, as its lines always said
STATUS_REFRESH_SECONDS = 60


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Report:
    """What one policy's status says: its object as last seen, and what reconcile found for it."""

    obj: dict  # the TASPolicy as last seen; its status is replaced once written
    policy: Policy | None  # None when invalid
    error: PolicyError | None  # why it is invalid
    violating: list[str]  # sorted nodes breaking its deschedule rules
    not_set: list[tuple[str, str]]  # (reason, message) for each of its labels not set
    audited: dict[str, str] | None  # the Enforced condition of a policy in audit mode


class StatusWriter:
    """Writes policy statuses through `custom` (CustomObjectsApi) and Events through `core` (CoreV1Api)."""

    def __init__(self, core: Any, custom: Any):
        self.core, self.custom = core, custom
        self._written: dict[str, tuple[object, float]] = {}  # policy key -> (what was written, when)
        self._events_sent: set[tuple[str, int, str]] = set()

    def forget(self, key: str) -> None:
        """A deleted policy: a policy of the same name made later gets its status at once."""
        self._written.pop(key, None)

    def write(self, key: str, report: Report, now: float) -> None:
        """Record the report's Events not yet recorded, then write its status if it changed (or
        the last write is STATUS_REFRESH_SECONDS old); `now` is time.monotonic()."""
        obj, policy = report.obj, report.policy
        meta = obj.get("metadata", {})
        generation = int(meta.get("generation") or 0)
        condition = valid_condition(report.error)
        if report.error is not None:
            self.event(obj, generation, "InvalidPolicy", condition["message"])
        elif policy is not None:
            for warning in policy.warnings:
                self.event(obj, generation, warning.reason, str(warning))
        warned = warning_condition(policy) if policy is not None else None
        unset = labels_not_set_condition(report.not_set)
        if policy is not None and unset is not None:
            for reason, why in report.not_set:
                self.event(obj, generation, reason, why)
        audited = report.audited
        nodes = report.violating
        content = (condition["status"], condition["message"], tuple(nodes), generation,
                   warned["message"] if warned else None, unset["message"] if unset else None,
                   audited["message"] if audited else None)
        last = self._written.get(key)
        if last and last[0] == content and now - last[1] < STATUS_REFRESH_SECONDS:
            return
        conditions: list[dict[str, Any]] = [condition]  # each gains an int observedGeneration
        if policy is not None:
            conditions.append(violating_condition(policy, nodes))
            conditions += [each for each in (warned, unset, audited) if each is not None]
        stamp = now_iso()
        status = {"conditions": with_transitions(conditions, (obj.get("status") or {}).get("conditions") or [],
                                                 generation, stamp),
                  "violatingNodes": nodes, "lastEvaluated": stamp, "observedGeneration": generation}
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {"status": status})
        except client.ApiException as error:
            if error.status != 404:
                log.warning("writing status of %s: %s", key, error.reason)
            return
        obj["status"] = status
        self._written[key] = (content, now)

    def event(self, obj: dict, generation: int, reason: str, message: str) -> None:
        """A Warning Event on the policy, once per generation and message."""
        meta = obj["metadata"]
        marker = (f"{meta['namespace']}/{meta['name']}", generation, message)
        if marker in self._events_sent:
            return
        now = datetime.datetime.now(datetime.UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=meta["namespace"]),
            involved_object=client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}", kind=KIND, name=meta["name"],
                namespace=meta["namespace"], uid=meta.get("uid")),
            reason=reason, message=message, type="Warning",
            first_timestamp=now, last_timestamp=now, count=1,
            source=client.V1EventSource(component="tas-extender"))
        try:
            self.core.create_namespaced_event(meta["namespace"], event)
            self._events_sent.add(marker)
        except client.ApiException as error:
            log.warning("recording event for %s: %s", marker[0], error.reason)

