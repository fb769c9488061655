"""Load-aware filter and score arithmetic over plain values, after crane's pkg/plugins/dynamic/stats.go."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tas_extender.decide.load.annotations import fresh_values
from tas_extender.decide.load.policy import LoadPolicy

# Points taken off the 0..100 score per hot point (crane's plugins.go: score - hotValue*10).
HOT_PENALTY = 10
MAX_SCORE = 100  # crane's framework.MaxNodeScore
MAX_EXTENDER_SCORE = 10


@dataclass(frozen=True)
class LoadState:
    """What load decisions read at one moment: each node's annotations and its recent bindings."""

    policy: LoadPolicy
    now: float  # unix seconds
    annotations: Callable[[str], Mapping[str, str] | None]  # node -> its annotations (None: unknown)
    bindings: Callable[[str, float], int]  # (node, window s) -> pods bound there in the last window

    def values(self, node: str) -> dict[str, float]:
        return fresh_values(self.annotations(node) or {}, self.policy, self.now)

    def hot_value(self, node: str) -> int:
        return hot_value(self.policy, [self.bindings(node, window) for window, _ in self.policy.hot])


def _number(value: float, other: float) -> str:
    """Short, but never so short that a value above its limit prints equal to it."""
    text = f"{value:.4g}"
    return repr(value) if text == f"{other:.4g}" else text


def overloaded(policy: LoadPolicy, values: Mapping[str, float]) -> str | None:
    """Why a node must not take the pod (a predicate metric strictly above its limit), or None.

    As crane's isOverLoad: a metric without data never filters, a 0 limit is off.
    """
    reasons = [
        f"{metric} {_number(values[metric], limit)} above {limit:g}"
        for metric, limit in policy.limits.items()
        if limit > 0 and metric in values and values[metric] > limit
    ]
    return f"load: {', '.join(reasons)}" if reasons else None


def hot_value(policy: LoadPolicy, counts: Sequence[int]) -> int:
    """Hot points from the bindings counted in each hot rule's window (same order as policy.hot).

    The seed: a point per rule whose window holds more than `count` bindings. crane's annotator
    (pkg/controller/annotator/node.go): `bindings // count` per rule, summed.
    """
    if policy.hot_formula == "seed":
        return sum(1 for (_, limit), seen in zip(policy.hot, counts, strict=True) if seen > limit)
    return sum(seen // limit for (_, limit), seen in zip(policy.hot, counts, strict=True))


def node_score(policy: LoadPolicy, values: Mapping[str, float]) -> int:
    """crane's getNodeScore: sum (1 - usage) * w * 100 / sum w, truncated to an integer.

    A priority metric without data adds nothing but keeps its weight (it counts as no headroom);
    no priority, or weights summing to 0, scores 0 (crane divides 0 by 0 there).
    """
    score = weight = 0.0
    for metric, w in policy.weights.items():
        if metric in values:
            score += (1.0 - values[metric]) * w * MAX_SCORE
        weight += w
    if not weight > 0:
        return 0
    return int(score / weight)


def final_score(score: int, hot: int) -> int:
    """The 0..100 score less 10 per hot point, clamped (crane's Score and NormalizeScore)."""
    return min(MAX_SCORE, max(0, score - HOT_PENALTY * hot))


def _round_half_up(value: float) -> int:
    # The epsilon keeps 4.4999999999 (float error on an exact .5) from rounding down.
    return math.floor(value + 0.5 + 1e-9)


def extender_score(score_0_100: float) -> int:
    """A 0..100 score on kube-scheduler's extender scale 0..10, rounding half up."""
    if math.isnan(score_0_100):
        return 0
    return min(MAX_EXTENDER_SCORE, max(0, _round_half_up(score_0_100 / 10.0)))


def load_failed(state: LoadState, nodes: Sequence[str]) -> dict[str, str]:
    """Node -> reason, for the nodes whose load is above a predicate's limit."""
    return {n: reason for n in nodes if (reason := overloaded(state.policy, state.values(n)))}


def crane_scores(state: LoadState, nodes: Sequence[str]) -> list[int]:
    """crane's 0..100 scores in the order of `nodes`: headroom, minus the hotspot penalty."""
    return [final_score(node_score(state.policy, state.values(n)), state.hot_value(n)) for n in nodes]


def load_scores(state: LoadState, nodes: Sequence[str]) -> list[int]:
    """The 0..10 extender scores in the order of `nodes`."""
    return [extender_score(score) for score in crane_scores(state, nodes)]


def combine(policy_score: int | None, load_score: int,
            policy_weight: float = 1.0, load_weight: float = 1.0) -> int:
    """The weighted mean of a TASPolicy's scheduleonmetric score and the load score (both 0..10).

    A pod without a TASPolicy (policy_score None) gets the load score alone.
    """
    if policy_score is None:
        return load_score
    if policy_weight < 0 or load_weight < 0 or not policy_weight + load_weight > 0:
        raise ValueError("weights must be >= 0 and not both 0")
    mean = (policy_score * policy_weight + load_score * load_weight) / (policy_weight + load_weight)
    return min(MAX_EXTENDER_SCORE, max(0, _round_half_up(mean)))


def is_daemonset_pod(pod_metadata: Mapping[str, Any] | None) -> bool:
    """Whether a DaemonSet owns the pod; such a pod belongs on its node whatever the load."""
    owners = (pod_metadata or {}).get("ownerReferences") or []
    return any(isinstance(owner, Mapping) and owner.get("kind") == "DaemonSet" for owner in owners)
