"""The decision of one scheduler request: the TASPolicy's part, then the load part, and their mix.

`Decider` is where every decision is made: it answers kube-scheduler's two verbs with the bytes to
send (the HTTP layer only reads the body and writes the answer), and `evaluate` and `explain` ask
the same object, over an offline engine, for the same decisions as values (`answer`, `verdicts`).
Under it, pure functions over the policy's verdicts and the load inputs, as crane keeps its
plugin glue (plugins.go) apart from its arithmetic (stats.go, here `load/decide.py` and
`strategies/`, whose decisions only the engine asks for).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, NamedTuple

import orjson

from tas_extender.decide import audit, wire
from tas_extender.decide.engine import Engine, View
from tas_extender.decide.load.decide import LoadState, combine, is_daemonset_pod, load_failed, load_scores
from tas_extender.decide.policy import Policy
from tas_extender.decide.telemetry import Telemetry

log = logging.getLogger("tas_extender.extender")
LOGGED_NODES = 20
NOT_DECIDED = ("tas-extender is starting: policies and their metrics are not loaded yet, "
               "so no decision can be made; retry after one sync period")
# Told what an audit-mode policy would have filtered for a pod: (pod metadata, policy, node ->
# reason of the nodes it would have failed, number of candidate nodes). audit.PodEvents is one.
AuditReport = Callable[[Mapping[str, Any], Policy, Mapping[str, str], int], None]


def enforced(policy: Policy | None) -> Policy | None:
    """The policy the scheduler's answers follow: none for a policy in audit mode, whose
    verdicts are reported, not enforced (the pod is answered as one without a policy)."""
    return None if policy is None or policy.audit else policy


def filter_nodes(pod_metadata: Mapping[str, Any] | None, nodes: Sequence[str], policy_failed: dict[str, str],
                 load: LoadState | None) -> dict[str, str]:
    """Node -> reason for the nodes that fail: the policy's verdicts first, load on what is left.

    `policy_failed` is taken over and extended (it is the caller's fresh dict).
    """
    # DaemonSet pods belong on their node whatever its load (crane's Filter skips them too).
    if load is not None and not is_daemonset_pod(pod_metadata):
        policy_failed.update(load_failed(load, [n for n in nodes if n not in policy_failed]))
    return policy_failed


def prioritize(pod_metadata: Mapping[str, Any] | None, nodes: Sequence[str], policy_scores: list[int] | None,
               load: LoadState | None, load_weight: float = 1.0) -> list[int]:
    """0..10 per node, in the order of `nodes`: the policy's score (None: the pod has no
    TASPolicy), the load score, or their weighted mean (the policy weighs 1)."""
    if load is None or is_daemonset_pod(pod_metadata):
        return policy_scores if policy_scores is not None else [0] * len(nodes)
    by_load = load_scores(load, nodes)
    if policy_scores is None:
        return by_load
    return [combine(own, mine, 1.0, load_weight) for own, mine in zip(policy_scores, by_load, strict=True)]


@dataclass(frozen=True)
class Answer:
    """What the scheduler's filter and prioritize calls answer for one pod."""
    failed: dict[str, str]  # node -> reason, for the candidates that fail
    scores: list[int]  # 0..10 per candidate, in the order of the candidates


@dataclass(frozen=True)
class Verdicts:
    """What one policy decides about the nodes, enforced or not (in audit mode, what it would do)."""
    failed: dict[str, str]  # node -> reason, for the nodes its dontschedule rules filter
    scores: list[int]  # its scheduleonmetric score per node, in the order of the nodes
    violating: list[str]  # sorted: the nodes that break its deschedule rules
    labels: dict[str, dict[str, str]]  # node -> the labels its deschedule and labeling rules put there


class Kept(NamedTuple):
    """An answer kept for reuse: its bytes, the nodes it fails, how many candidates it decided."""
    answer: bytes
    failed: dict[str, str]
    candidates: int


class Decider:
    """kube-scheduler's filter and prioritize for one request, answered as the bytes to send.

    Between two syncs (the engine's view is the same object) the answer for one policy and one
    list of candidate names is the same, so in NodeNames mode it is computed once and reused: the
    next pod of that policy costs a dictionary lookup, by the names' array as the scheduler wrote
    it (wire.parse does not decode an array it finds in `known_names`). A new view (new metrics, a policy changed)
    drops every reused answer. With load-aware mode on nothing is reused: a load answer depends on
    the clock and on every binding. Full-Nodes answers carry the Node objects as sent and are
    always built afresh; their decision is the same either way.
    """

    def __init__(self, engine: Engine, telemetry: Telemetry | None = None,
                 load: Callable[[], LoadState] | None = None, load_weight: float = 1.0,
                 decided: Callable[[], bool] = lambda: True, audit_events: AuditReport | None = None,
                 reuse_limit: int = 1024):
        self.engine, self.telemetry, self.load, self.load_weight = engine, telemetry, load, load_weight
        self.decided, self.audit_events, self.reuse_limit = decided, audit_events, reuse_limit
        if telemetry is not None:  # the counters' children looked up once, not on every call
            self._passed_total = telemetry.decisions.labels("filter", "passed")
            self._failed_total = telemetry.decisions.labels("filter", "failed")
            self._scored_total = telemetry.decisions.labels("prioritize", "scored")
        self._lock = threading.Lock()
        self._reused_view: View | None = None
        # The NodeNames array as sent -> (verb, policy key) -> the answer kept
        self._answers: dict[bytes, dict[tuple[str, str | None], Kept]] = {}

    @property
    def known_names(self) -> Container[bytes]:
        """NodeNames arrays (as sent) that have been decoded and decided before: wire.parse need
        not decode them again to find their answer."""
        return self._answers

    # --- the decision, as values (evaluate, explain; the HTTP answers below) ---------------

    def answer(self, pod: Mapping[str, Any], policy: Policy | None, names: Sequence[str]) -> Answer:
        """What filter and prioritize answer for `pod` over the candidates `names`; `policy` is
        the pod's TASPolicy (None: it has none), as the caller found it."""
        policy = enforced(policy)
        return Answer(self._failed(policy, pod, names), self._scores(policy, pod, names))

    def verdicts(self, policy: Policy, names: Sequence[str]) -> Verdicts:
        """What `policy` decides about the nodes `names` on its own, whether enforced or not."""
        view = self.engine.view
        violating = view.violating(policy, names)
        return Verdicts(self.engine.failed(policy, names), view.scores(policy, names), violating,
                        view.labels(policy, names, violating))

    def _failed(self, policy: Policy | None, pod: Mapping[str, Any], names: Sequence[str]) -> dict[str, str]:
        return filter_nodes(pod, names, self.engine.failed(policy, names) if policy else {},
                            self.load() if self.load is not None else None)

    def _scores(self, policy: Policy | None, pod: Mapping[str, Any], names: Sequence[str]) -> list[int]:
        return prioritize(pod, names, self.engine.scores(policy, names) if policy else None,
                          self.load() if self.load is not None else None, self.load_weight)

    # --- the HTTP answers ------------------------------------------------------------------

    def filter(self, args: wire.ExtenderArgs) -> bytes:
        """The ExtenderFilterResult for a request."""
        if not self.decided():
            # Just started: a policy's metrics are not fetched yet and every node would pass it
            # (fail-open). An Error makes the scheduler keep the pod and retry (ignorable: false)
            # or place it without us (ignorable: true), rather than place it against the policy.
            return wire.filter_error(NOT_DECIDED)
        policy = self.engine.policy_for(args.pod)
        if policy is not None and policy.audit:
            self._audit(policy, args.pod, args.names)
        policy = enforced(policy)
        key, view, kept = self._reused("filter", policy, args)
        if kept is None:
            failed = self._failed(policy, args.pod, args.names)
            kept = Kept(wire.filter_result(args, failed), failed, len(args.names))
            self._keep(key, view, kept)
        if policy is not None and log.isEnabledFor(logging.INFO):
            _log_filter(policy.name, args.names, kept.failed)
        if self.telemetry is not None:
            self._passed_total.inc(kept.candidates - len(kept.failed))
            self._failed_total.inc(len(kept.failed))
        return kept.answer

    def prioritize(self, args: wire.ExtenderArgs) -> bytes:
        """The HostPriorityList for a request."""
        policy = enforced(self.engine.policy_for(args.pod))
        key, view, kept = self._reused("prioritize", policy, args)
        if kept is None:
            scores = self._scores(policy, args.pod, args.names)
            kept = Kept(orjson.dumps([{"Host": node, "Score": score}
                                      for node, score in zip(args.names, scores, strict=True)]), {}, len(args.names))
            self._keep(key, view, kept)
        if self.telemetry is not None:
            self._scored_total.inc(kept.candidates)
        return kept.answer

    def load_filter(self, args: wire.ExtenderArgs) -> bytes:
        """The ExtenderFilterResult of the load entry: load-aware mode's second extender entry,
        to which the scheduler sends every pod (ignorable), beside the policy entry (filter), to
        which it sends the pods requesting the managed resource (not ignorable). A pod of a policy
        is the policy entry's to decide, load and all: here it passes every node, so that while
        the extender is down its policy still holds (the policy entry fails and the pod waits)
        and every other pod is still placed. Without load-aware mode every node passes."""
        failed: dict[str, str] = {}
        if self.load is not None and self.engine.policy_for(args.pod) is None:
            failed = filter_nodes(args.pod, args.names, {}, self.load())
        if self.telemetry is not None:
            self._passed_total.inc(len(args.names) - len(failed))
            self._failed_total.inc(len(failed))
        return wire.filter_result(args, failed)

    def load_prioritize(self, args: wire.ExtenderArgs) -> bytes:
        """The HostPriorityList of the load entry: the load score of a pod of no policy; 0 for
        every node where the policy entry (prioritize) scores the pod, or without load-aware mode."""
        names = args.names
        scores = [0] * len(names)
        if self.load is not None and self.engine.policy_for(args.pod) is None:
            scores = prioritize(args.pod, names, None, self.load(), self.load_weight)
        if self.telemetry is not None:
            self._scored_total.inc(len(names))
        return orjson.dumps([{"Host": node, "Score": score} for node, score in zip(names, scores, strict=True)])

    # --- reuse -------------------------------------------------------------------------------

    def _reused(self, verb: str, policy: Policy | None, args: wire.ExtenderArgs
                ) -> tuple[tuple[bytes, tuple[str, str | None]] | None, View, Kept | None]:
        """(key, the view the answer stands on, the answer kept for it or None). The key is None
        where nothing is reused: load-aware mode, full Node objects."""
        view = self.engine.view  # taken first: an answer computed now stands on this view or a newer one
        if self.load is not None or args.names_json is None:
            return None, view, None
        # The array as sent: one hash of its bytes (kept by the bytes object), one comparison.
        key = (args.names_json, (verb, policy.key if policy is not None else None))
        with self._lock:
            if self._reused_view is not view:
                return key, view, None
            return key, view, self._answers.get(key[0], {}).get(key[1])

    def _keep(self, key: tuple[bytes, tuple[str, str | None]] | None, view: View, kept: Kept) -> None:
        if key is None or view is not self.engine.view:  # a sync came in between: not kept
            return
        with self._lock:
            if self._reused_view is not view or len(self._answers) >= self.reuse_limit:
                self._answers, self._reused_view = {}, view
            self._answers.setdefault(key[0], {})[key[1]] = kept

    # --- telemetry and logs ------------------------------------------------------------------

    def _audit(self, policy: Policy, pod: Mapping[str, Any], names: list[str]) -> None:
        """What a policy in audit mode would have filtered: counted, logged and reported; nothing is filtered."""
        failed = self.engine.failed(policy, names)
        if self.telemetry is not None:
            self.telemetry.audit_decisions.labels(policy.key, "would_fail").inc(len(failed))
            self.telemetry.audit_decisions.labels(policy.key, "would_pass").inc(len(names) - len(failed))
        if log.isEnabledFor(logging.INFO):
            log.info("audit: %s would filter %d of %d node(s) for pod %s/%s%s", policy.key, len(failed), len(names),
                     pod.get("namespace") or "default", pod.get("name") or "?",
                     f": {audit.listing(policy, failed, LOGGED_NODES)}" if failed else "")
        if self.audit_events is not None:
            self.audit_events(pod, policy, failed, len(names))


def _log_filter(policy: str, names: list[str], failed: dict[str, str]) -> None:
    """TAS's log lines, shortened past LOGGED_NODES nodes: at 5000 nodes they cost the scheduler time."""
    passed = [n for n in names if n not in failed]
    log.info("Filtered nodes available for %s : %s%s", policy, " ".join(passed[:LOGGED_NODES]),
             f" ... and {len(passed) - LOGGED_NODES} more" if len(passed) > LOGGED_NODES else "")
    prefix = f"{policy}: dontschedule rule "
    for node, reason in islice(failed.items(), LOGGED_NODES):
        log.info("%s violating : %s", node, reason.removeprefix(prefix))
    if len(failed) > LOGGED_NODES:
        log.info("... and %d more nodes violating %s", len(failed) - LOGGED_NODES, policy)
