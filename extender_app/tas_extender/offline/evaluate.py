"""The decision document of `tas-extender evaluate`: every strategy of every policy, and load, at once.

Every decision is the `Decider`'s, over an offline engine of the given policies and snapshot: the
object the server answers with; this module only asks it and writes the answers down.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tas_extender.decide.decision import Decider
from tas_extender.decide.engine import Engine
from tas_extender.decide.load.decide import LoadState, crane_scores, node_score
from tas_extender.decide.metrics import Snapshot
from tas_extender.decide.policy import Policy


def _verdicts(nodes: Sequence[str], failed: dict[str, str]) -> dict[str, dict]:
    return {node: {"passed": node not in failed, "reason": failed.get(node, "")} for node in nodes}


def evaluate(policies: Iterable[Policy], snapshot: Snapshot, nodes: Sequence[str],
             fail_closed: bool = False, load: LoadState | None = None, load_weight: float = 1.0) -> dict:
    """With `load`, each policy also gets `request` (what the scheduler's filter and prioritize
    calls answer for a pod with that policy) and the document gets `load` (for a pod without one).
    A policy in audit mode gets `"enforcement": "audit"`: its decisions are what it would do."""
    policies = list(policies)
    decider = Decider(Engine.offline(policies, snapshot, nodes, fail_closed),
                      load=None if load is None else lambda: load, load_weight=load_weight)
    out: dict[str, dict] = {}
    for policy in policies:
        verdicts = decider.verdicts(policy, nodes)
        out[policy.key] = {
            "filter": _verdicts(nodes, verdicts.failed),
            "scores": dict(zip(nodes, verdicts.scores, strict=True)),
            "violating": verdicts.violating,
            "labels": {node: verdicts.labels[node] for node in sorted(verdicts.labels)},
        }
        if policy.audit:
            out[policy.key]["enforcement"] = policy.enforcement
        if load is not None:
            answer = decider.answer({}, policy, nodes)  # a pod of the policy, not a DaemonSet's
            out[policy.key]["request"] = {"filter": _verdicts(nodes, answer.failed),
                                          "scores": dict(zip(nodes, answer.scores, strict=True))}
    document: dict[str, dict] = {"policies": out}
    if load is not None:
        answer = decider.answer({}, None, nodes)
        document["load"] = {
            "filter": _verdicts(nodes, answer.failed),
            "scores": dict(zip(nodes, answer.scores, strict=True)),
            "crane_scores": dict(zip(nodes, crane_scores(load, nodes), strict=True)),
            "usage_scores": {node: node_score(load.policy, load.values(node)) for node in nodes},
            "hot_values": {node: load.hot_value(node) for node in nodes},
            "usage": {node: load.values(node) for node in nodes},
        }
    return document
