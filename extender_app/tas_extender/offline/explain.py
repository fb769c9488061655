"""`tas-extender explain`: why a pod would pass or fail each node, and how each node scores.

The verdicts and scores are the `Decider`'s (`decide/decision.py`), the object the server answers
with, over an offline engine of the same inputs: the pod's metadata, its TASPolicy, the metric samples
(kept while younger than the maximum age) and, in load mode, the nodes' load annotations and
recent bindings. What this adds is the evidence: each metric's value and age per node, and in
load mode the load values and the hot value. For a policy in audit mode the answers are the
server's (it enforces nothing) and each node also shows what enforcing the policy would do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tas_extender.decide.decision import Decider
from tas_extender.decide.engine import Engine
from tas_extender.decide.load.decide import LoadState, is_daemonset_pod
from tas_extender.decide.metrics import Sample, Snapshot
from tas_extender.decide.policy import Policy
from tas_extender.decide.rules import format_value

DECIDING = ("dontschedule", "scheduleonmetric")  # the strategies the scheduler's calls read


@dataclass(frozen=True)
class Reading:
    value: float | None  # None: no sample for the node
    age: float | None  # seconds since the sample was taken
    used: bool  # fresh enough to decide on (else it counts as missing)


@dataclass
class NodeAnswer:
    passed: bool
    reason: str  # why it was filtered; empty when it passed
    score: int  # 0..10, what prioritize answers
    metrics: dict[str, Reading] = field(default_factory=dict)
    load: dict[str, float] | None = None  # fresh load values, in load mode
    hot_value: int | None = None
    would_fail: str = ""  # audit mode: why the policy would filter the node if it were enforced


@dataclass
class Explanation:
    pod: str  # namespace/name
    policy: str | None  # namespace/name of the pod's TASPolicy
    note: str  # what decides this pod, in a sentence
    nodes: dict[str, NodeAnswer]
    audit: bool = False  # the pod's policy is in audit mode

    def as_dict(self) -> dict[str, Any]:
        def node(answer: NodeAnswer) -> dict[str, Any]:
            out: dict[str, Any] = {
                "passed": answer.passed, "reason": answer.reason, "score": answer.score,
                "metrics": {m: {"value": r.value, "age_seconds": None if r.age is None else round(r.age, 1),
                                "used": r.used} for m, r in answer.metrics.items()}}
            if answer.load is not None:
                out["load"], out["hot_value"] = answer.load, answer.hot_value
            if self.audit:
                out["would_fail"] = answer.would_fail
            return out

        document = {"pod": self.pod, "policy": self.policy, "note": self.note,
                    "nodes": {name: node(answer) for name, answer in self.nodes.items()}}
        if self.audit:
            document["enforcement"] = "audit"
        return document


def _deciding_metrics(policy: Policy) -> list[str]:
    names = {rule.metricname for name in DECIDING if (strategy := policy.strategy(name))
             for rule in strategy.rules if rule.metricname}
    return sorted(names)


def explain(pod: Mapping[str, Any], policy: Policy | None, samples: Mapping[str, Mapping[str, Sample]],
            nodes: Sequence[str], now: float, max_age: float, fail_closed: bool = False,
            load: LoadState | None = None, load_weight: float = 1.0, missing_policy: str | None = None) -> Explanation:
    """The filter and prioritize answers for `pod` over `nodes`, with their evidence.

    `missing_policy` names a policy the pod's label asks for that does not exist (the server
    then treats the pod as having none)."""
    snapshot = Snapshot.build({m: dict(by_node) for m, by_node in samples.items()}, now, max_age)
    decider = Decider(Engine.offline([policy] if policy else [], snapshot, nodes, fail_closed),
                      load=None if load is None else lambda: load, load_weight=load_weight)
    answer = decider.answer(pod, policy, nodes)  # in audit mode, as for a pod without a policy
    failed = answer.failed
    audit = policy is not None and policy.audit
    verdicts = decider.verdicts(policy, nodes).failed if policy and audit else {}  # what enforcing would filter
    metrics = _deciding_metrics(policy) if policy else []
    by_load = load is not None and not is_daemonset_pod(pod)
    answers = {}
    for node, score in zip(nodes, answer.scores, strict=True):
        readings = {}
        for metric in metrics:
            sample = samples.get(metric, {}).get(node)
            readings[metric] = Reading(None, None, False) if sample is None else Reading(
                sample.value, now - sample.timestamp, snapshot.get(metric, node) is not None)
        answers[node] = NodeAnswer(node not in failed, failed.get(node, ""), score, readings,
                                   load.values(node) if by_load and load else None,
                                   load.hot_value(node) if by_load and load else None,
                                   verdicts.get(node, ""))
    name = f"{pod.get('namespace') or 'default'}/{pod.get('name') or '?'}"
    return Explanation(name, policy.key if policy else None, _note(policy, missing_policy, load, pod), answers,
                       audit)


def _note(policy: Policy | None, missing: str | None, load: LoadState | None, pod: Mapping[str, Any]) -> str:
    parts = []
    if policy is not None and policy.audit:
        parts.append(f"TASPolicy {policy.key} is in audit mode: not enforced, it filters and scores nothing "
                     "(as for a pod without a policy); 'would fail' shows what enforcing it would filter")
    elif policy is not None:
        parts.append(f"TASPolicy {policy.key} decides (dontschedule filters, scheduleonmetric scores)")
    elif missing:
        parts.append(f"the pod names TASPolicy {missing}, which does not exist: no policy applies")
    else:
        parts.append("the pod names no TASPolicy (label telemetry-policy)")
    if load is not None:
        parts.append("a DaemonSet pod: load does not apply" if is_daemonset_pod(pod)
                     else "node load filters and scores too (load-aware mode)")
    return "; ".join(parts)


def render(explanation: Explanation) -> str:
    """A table for people: one row per node, passing nodes first, best score first."""
    lines = [f"pod {explanation.pod}: {explanation.note}"]
    rows = sorted(explanation.nodes.items(), key=lambda item: (not item[1].passed, -item[1].score, item[0]))
    width = max([len("NODE"), *(len(name) for name in explanation.nodes)])
    lines.append(f"{'NODE':<{width}}  {'FILTER':<6}  SCORE  EVIDENCE")
    for name, answer in rows:
        evidence = [_reading(metric, reading) for metric, reading in answer.metrics.items()]
        if answer.load is not None:
            evidence += [f"{metric}={value:.3f}" for metric, value in sorted(answer.load.items())] or ["no fresh load"]
            evidence.append(f"hot={answer.hot_value}")
        if not answer.passed:
            evidence.append(f"({answer.reason})")
        if answer.would_fail:
            evidence.append(f"(audit, would fail: {answer.would_fail})")
        lines.append(f"{name:<{width}}  {'pass' if answer.passed else 'FAIL':<6}  {answer.score:>5}  "
                     + " ".join(evidence))
    return "\n".join(lines)


def _reading(metric: str, reading: Reading) -> str:
    if reading.value is None:
        return f"{metric}=missing"
    stale = "" if reading.used else ", stale: counts as missing"
    return f"{metric}={format_value(reading.value)} ({reading.age:.0f}s old{stale})"
