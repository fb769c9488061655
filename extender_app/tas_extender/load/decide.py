"""Load-aware filter and score decisions over plain values; no I/O."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tas_extender.load.hotspot import BindingCounter
from tas_extender.load.policy import LoadPolicy

# Points taken off the 0..100 score per hot point, as in crane.
HOT_PENALTY = 10.0
# The base score when no priority metric has data: neither favoured nor avoided.
NEUTRAL_SCORE = 50.0
MAX_EXTENDER_SCORE = 10


def _number(value: float, other: float) -> str:
    """Short, but never so short that a value above its limit prints equal to it."""
    text = f"{value:.4g}"
    return repr(value) if text == f"{other:.4g}" else text


def overloaded(policy: LoadPolicy, values: Mapping[str, float]) -> str | None:
    """Why a node must not take the pod (a predicate metric strictly above its limit), or None.

    A metric without data never filters: missing load data fails open, as in crane.
    """
    reasons = [
        f"{metric} {_number(values[metric], limit)} above {limit:g}"
        for metric, limit in policy.limits.items()
        if metric in values and values[metric] > limit
    ]
    return f"load: {', '.join(reasons)}" if reasons else None


def hot_points(policy: LoadPolicy, counter: BindingCounter, node: str, now: float) -> float:
    """One point per binding beyond each hot rule's count within its window, summed over the rules."""
    return float(sum(max(0, counter.count(node, window, now) - count) for window, count in policy.hot))


def load_score(policy: LoadPolicy, values: Mapping[str, float], hot_points: float) -> float:
    """0..100, higher for more headroom: sum (1 - usage) * w * 100 / sum w, minus 10 per hot point.

    Weights are renormalised over the priority metrics that have data, so a node missing one
    metric is judged on the others. With no data at all the base is 50 (neutral), so such a node
    is neither preferred as if idle nor avoided as if full.
    """
    present = {metric: weight for metric, weight in policy.weights.items() if metric in values}
    total = sum(present.values())
    if total > 0:
        base = sum((1.0 - values[metric]) * weight for metric, weight in present.items()) * 100.0 / total
    else:
        base = NEUTRAL_SCORE
    return min(100.0, max(0.0, base - HOT_PENALTY * hot_points))


def _round_half_up(value: float) -> int:
    # The epsilon keeps 4.4999999999 (float error on an exact .5) from rounding down.
    return math.floor(value + 0.5 + 1e-9)


def extender_score(score_0_100: float) -> int:
    """A 0..100 score on kube-scheduler's extender scale 0..10, rounding half up."""
    if math.isnan(score_0_100):
        return 0
    return min(MAX_EXTENDER_SCORE, max(0, _round_half_up(score_0_100 / 10.0)))


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
