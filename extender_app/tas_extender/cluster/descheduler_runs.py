"""Eviction in seconds: a descheduler run started by the leader when a node starts violating.

The descheduler evicts only the pods of nodes the extender labelled violating, and only when it
runs: on its CronJob's schedule (every 5 minutes by default), so a bad node kept its pods that long.
When a node starts violating a policy's deschedule rules (it did not in the last sync round and
does in this one, in which the leader labelled it), the leader starts a run of the descheduler's
CronJob now, as `kubectl create job --from=cronjob/<name>` starts one: a Job made from the
CronJob's template and owned by it, so that the CronJob's history limit and the uninstall remove
it as one of its own runs. It is the same descheduler with the same policy: its eviction caps and
every PodDisruptionBudget hold as in a scheduled run.

At most one run at a time: while a Job of the CronJob has not finished (a scheduled run, or one
started here), a new violation waits for it and then starts one run, since the run under way may
have listed the nodes before the label. Runs started here are at least MIN_INTERVAL apart, however
often nodes start violating. A suspended CronJob (its owner paused it) gets no run, and the
violations seen meanwhile are dropped: its schedule, once resumed, covers them. A CronJob that does
not exist (the descheduler on the host, or not installed) starts nothing and is looked for again
after LOOK_AGAIN seconds. Every replica follows the rounds, so that a new leader knows what the
old one saw (what the old one left waiting, the schedule covers); the first round of a process has
nothing to compare with and starts nothing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any

from tas_extender.cluster.advertise import api_error
from tas_extender.cluster.reconcile import shadowed_policies

if TYPE_CHECKING:
    from kubernetes import client
    from prometheus_client import Counter

    from tas_extender.decide.engine import View
    from tas_extender.decide.policy import Policy

log = logging.getLogger(__name__)

MIN_INTERVAL = 20.0  # seconds between two runs started here
# On each Job started here: what it was started for ("node-1 violates ns/policy, ...").
STARTED_FOR_ANNOTATION = "telemetry.intel.com/started-for"
# On each run started here, valued the CronJob's name: the admission policy that compares a run
# with the CronJob's template matches only Jobs with it (the extender role's descheduler-runs.yaml.j2)
RUN_LABEL = "telemetry.intel.com/descheduler-run"
LOOK_AGAIN = 300.0  # seconds before a missing CronJob is looked for again
# The API server's refusals of a Job: 403 (RBAC, or the admission policy's reason Forbidden) and
# 422 (an admission policy that could not be evaluated: kube-apiserver v1.36 loses a policy's
# parameter after its binding was deleted once, kubernetes/kubernetes#130887)
REFUSED = frozenset({403, 422})

Violations = frozenset[tuple[str, str]]  # (policy key, node)


def violations(view: View, policies: Iterable[Policy], nodes: Collection[str]) -> Violations:
    """The (policy key, node) pairs the descheduler acts on: the nodes among `nodes` that break
    an enforced policy's deschedule rules, for the policies that set their labels (not one
    whose name an older policy of another namespace holds)."""
    policies = list(policies)
    shadowed = shadowed_policies(policies)
    return frozenset((policy.key, node) for policy in policies
                     if not policy.audit and policy.key not in shadowed and policy.strategy("deschedule") is not None
                     for node in view.violating(policy, nodes))


class RunState(Enum):
    READY = "ready"  # a run may start
    BUSY = "busy"  # a run of the CronJob has not finished
    SUSPENDED = "suspended"
    MISSING = "missing"


def _finished(job: dict[str, Any]) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


class CronJobRuns:
    """The descheduler's CronJob `namespace/name` through the API: whether a run may start, and
    starting one. Read as plain JSON, with no client models."""

    def __init__(self, batch: client.BatchV1Api, cron_job: str):
        self.batch: Any = batch  # called with _preload_content=False, which the client's types do not know
        self.namespace, _, self.name = cron_job.partition("/")

    def _cron_job(self) -> dict[str, Any] | None:
        from kubernetes.client import ApiException

        try:
            response = self.batch.read_namespaced_cron_job(self.name, self.namespace, _preload_content=False)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return json.loads(response.data)

    def state(self) -> tuple[RunState, dict[str, Any] | None]:
        cron_job = self._cron_job()
        if cron_job is None:
            return RunState.MISSING, None
        if cron_job["spec"].get("suspend"):
            return RunState.SUSPENDED, cron_job
        jobs = json.loads(self.batch.list_namespaced_job(self.namespace, _preload_content=False).data)["items"]
        uid = cron_job["metadata"]["uid"]
        for job in jobs:
            if any(owner.get("uid") == uid for owner in job["metadata"].get("ownerReferences") or []) \
                    and not _finished(job):
                return RunState.BUSY, cron_job
        return RunState.READY, cron_job

    def start(self, cron_job: dict[str, Any], reason: str) -> str:
        """A Job from the CronJob's template, owned by it, annotated with `reason`; its name."""
        template = cron_job["spec"]["jobTemplate"]
        metadata = template.get("metadata") or {}
        body = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {
                "generateName": f"{self.name}-now-",
                "namespace": self.namespace,
                "labels": {**(metadata.get("labels") or {}), RUN_LABEL: self.name},
                "annotations": {**(metadata.get("annotations") or {}),
                                "cronjob.kubernetes.io/instantiate": "manual",
                                STARTED_FOR_ANNOTATION: reason[:1000]},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": self.name,
                                     "uid": cron_job["metadata"]["uid"], "controller": True,
                                     "blockOwnerDeletion": True}],
            },
            "spec": template["spec"],
        }
        response = self.batch.create_namespaced_job(self.namespace, body, _preload_content=False)
        return json.loads(response.data)["metadata"]["name"]


class DeschedulerRuns:
    """Each sync round (`sync`), on every replica: which nodes violate; on the leader, a run of the
    descheduler started when a node started violating (see the module's docstring)."""

    def __init__(self, violations: Callable[[Collection[str]], Violations], runs: CronJobRuns, started: Counter,
                 clock: Callable[[], float] = time.monotonic, min_interval: float = MIN_INTERVAL):
        self.violations, self.runs, self.clock, self.min_interval = violations, runs, clock, min_interval
        self.started, self.failed = started.labels("started"), started.labels("failed")
        self._before: Violations | None = None
        self._waiting: Violations = frozenset()  # violations new since the last run started here
        # when this process last started a run, or was refused one: the next try waits min_interval
        self._last: float | None = None
        self._missing_until = 0.0

    def sync(self, nodes: Collection[str], leader: bool) -> str | None:
        """Follow one round; as leader, start a run if one is due. The Job's name, if started."""
        now = self.violations(nodes)
        before, self._before = self._before, now
        new = frozenset() if before is None else now - before
        # a node that stopped violating needs no run; a replica that does not lead keeps none waiting
        self._waiting = (self._waiting | new) & now if leader else frozenset()
        if not self._waiting:
            return None
        clock = self.clock()
        if (self._last is not None and clock - self._last < self.min_interval) or clock < self._missing_until:
            return None
        where = f"{self.runs.namespace}/{self.runs.name}"
        try:
            state, cron_job = self.runs.state()
            if state is RunState.MISSING:
                self._missing_until = clock + LOOK_AGAIN
                log.info("no CronJob %s: evictions wait for the descheduler's own schedule", where)
                return None
            if state is RunState.SUSPENDED:
                log.info("CronJob %s is suspended: no descheduler run for %s", where, _named(self._waiting))
                self._waiting = frozenset()
                return None
            if state is RunState.BUSY:
                return None  # its pods may have listed the nodes before the label: one more run after it
            assert cron_job is not None
            name = self.runs.start(cron_job, _named(self._waiting))
        except Exception as error:  # noqa: BLE001 - a failed start is tried again
            self.failed.inc()
            if getattr(error, "status", None) in REFUSED:
                # an admission policy's or RBAC's answer stays the same for a while: not every round
                self._last = clock
                log.warning("starting a run of CronJob %s was refused (%s); trying again in %.0f s, and the "
                            "CronJob's schedule runs meanwhile", where, api_error(error), self.min_interval)
            else:
                log.warning("starting a run of CronJob %s failed (%s); trying again next sync round", where,
                            api_error(error))
            return None
        self.started.inc()
        self._last = clock
        log.info("%s: started the descheduler run %s/%s", _named(self._waiting), self.runs.namespace, name)
        self._waiting = frozenset()
        return name


def _named(pairs: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{node} violates {key}" for key, node in sorted(pairs))
