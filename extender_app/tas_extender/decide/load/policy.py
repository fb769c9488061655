"""crane's DynamicSchedulerPolicy: parsing, validation, the seed's defaults, and warnings.

A policy file means what it means to crane (pkg/plugins/apis/policy, pkg/plugins/dynamic): a
missing section is empty, `maxLimitPecent: 0` switches a predicate off, a metric missing from
`syncPolicy` never has data. Only a document without `spec` (what the collection writes when no
policy is given) takes the seed's defaults.
"""

from __future__ import annotations

import math
import pathlib
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tas_extender.decide.duration import parse_duration
from tas_extender.decide.policy import METRIC_NAME, PolicyError

API_VERSION = "scheduler.policy.crane.io/v1alpha1"
KIND = "DynamicSchedulerPolicy"

# How hot points are counted: the seed's "a point when more than `count` pods landed in the
# window", or crane's annotator (`bindings // count` per rule, pkg/controller/annotator/node.go).
HotFormula = Literal["seed", "crane"]


def _positive_duration(value: Any) -> float:
    seconds = parse_duration(value)
    if not 0 < seconds < math.inf:
        raise ValueError(f"{value!r} must be longer than zero and finite")
    return seconds


class SyncRule(BaseModel):
    """How often node-annotator refreshes one metric; its annotation is valid for period + 5 min.

    A 0 period is refused: crane's annotator panics on it (time.NewTicker).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=METRIC_NAME)
    period: float

    @field_validator("period", mode="before")
    @classmethod
    def _period(cls, value: Any) -> float:
        return _positive_duration(value)


class PredicateRule(BaseModel):
    """A node whose usage fraction of this metric exceeds the limit takes no new pods; 0 is off."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=METRIC_NAME)
    # crane's spelling, kept so its policy files load unchanged. A fraction; usage can pass 1.
    maxLimitPecent: float = Field(ge=0, strict=True, allow_inf_nan=False)


class PriorityRule(BaseModel):
    """The weight of one metric's headroom in the score."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=METRIC_NAME)
    weight: float = Field(ge=0, strict=True, allow_inf_nan=False)


class HotValueRule(BaseModel):
    """Bindings to a node within `timeRange` cost it points; crane's annotator divides by `count`."""

    model_config = ConfigDict(extra="forbid")

    timeRange: float
    count: int = Field(ge=1, strict=True)

    @field_validator("timeRange", mode="before")
    @classmethod
    def _time_range(cls, value: Any) -> float:
        return _positive_duration(value)


class DynamicSchedulerSpec(BaseModel):
    """A missing section is empty, as in crane."""

    model_config = ConfigDict(extra="forbid")

    syncPolicy: list[SyncRule] | None = None
    predicate: list[PredicateRule] | None = None
    priority: list[PriorityRule] | None = None
    hotValue: list[HotValueRule] | None = None


class DynamicSchedulerPolicy(BaseModel):
    """The whole document as crane's policy file has it."""

    model_config = ConfigDict(extra="forbid")

    apiVersion: str
    kind: str
    metadata: dict[str, Any] | None = None
    spec: DynamicSchedulerSpec | None = None


@dataclass(frozen=True)
class LoadPolicy:
    """A validated policy: metric -> sync period (s), max fraction (0: off), weight; hot (window s, count) rules.

    Dicts keep the file's order: crane sums the weighted scores in that order.
    """

    sync: dict[str, float]
    limits: dict[str, float]
    weights: dict[str, float]
    hot: list[tuple[float, int]]
    hot_formula: HotFormula = "crane"

    @property
    def longest_hot_window(self) -> float:
        """How long binding history must be kept to answer every hot rule."""
        return max((window for window, _ in self.hot), default=0.0)


DEFAULT_POLICY = LoadPolicy(
    sync={
        "cpu_usage_avg_5m": 180.0,
        "cpu_usage_max_avg_1h": 900.0,
        "cpu_usage_max_avg_1d": 10800.0,
        "mem_usage_avg_5m": 180.0,
        "mem_usage_max_avg_1h": 900.0,
        "mem_usage_max_avg_1d": 10800.0,
    },
    limits={
        "cpu_usage_avg_5m": 0.65,
        "cpu_usage_max_avg_1h": 0.75,
        "mem_usage_avg_5m": 0.65,
        "mem_usage_max_avg_1h": 0.75,
    },
    weights={
        "cpu_usage_avg_5m": 0.2,
        "cpu_usage_max_avg_1h": 0.3,
        "cpu_usage_max_avg_1d": 0.5,
        "mem_usage_avg_5m": 0.2,
        "mem_usage_max_avg_1h": 0.3,
        "mem_usage_max_avg_1d": 0.5,
    },
    hot=[(300.0, 5), (60.0, 2)],
    hot_formula="seed",
)


def _field_path(location: tuple[Any, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "<root>"


def _unique(section: str, names: list[Any]) -> None:
    seen: set[Any] = set()
    for i, name in enumerate(names):
        if name in seen:
            field = "timeRange" if section == "hotValue" else "name"
            raise PolicyError(f"spec.{section}[{i}].{field}", f"{name!r} appears more than once")
        seen.add(name)


def parse_load_policy(document: dict | None) -> LoadPolicy:
    """A DynamicSchedulerPolicy document to a LoadPolicy, with crane's meaning.

    None, or a document without `spec`, gives the seed's defaults (crane would apply nothing).
    """
    if document is None:
        return DEFAULT_POLICY
    if not isinstance(document, dict):
        raise PolicyError("<root>", "a DynamicSchedulerPolicy must be an object")
    try:
        parsed = DynamicSchedulerPolicy.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        reason = first["msg"].removeprefix("Value error, ")
        raise PolicyError(_field_path(first["loc"]), reason) from None
    if parsed.apiVersion != API_VERSION:
        raise PolicyError("apiVersion", f"expected {API_VERSION}, got {parsed.apiVersion!r}")
    if parsed.kind != KIND:
        raise PolicyError("kind", f"expected {KIND}, got {parsed.kind!r}")
    if parsed.spec is None:
        return DEFAULT_POLICY
    spec = parsed.spec
    sync_rules, predicates = spec.syncPolicy or [], spec.predicate or []
    priorities, hot_rules = spec.priority or [], spec.hotValue or []
    # Duplicates are refused: crane would use the first period but count a priority twice.
    _unique("syncPolicy", [rule.name for rule in sync_rules])
    _unique("predicate", [rule.name for rule in predicates])
    _unique("priority", [rule.name for rule in priorities])
    _unique("hotValue", [rule.timeRange for rule in hot_rules])
    return LoadPolicy(sync={rule.name: rule.period for rule in sync_rules},
                      limits={rule.name: rule.maxLimitPecent for rule in predicates},
                      weights={rule.name: rule.weight for rule in priorities},
                      hot=[(rule.timeRange, rule.count) for rule in hot_rules],
                      hot_formula="crane")


def policy_warnings(policy: LoadPolicy) -> list[str]:
    """What in a valid policy does something its author may not expect, or differs from crane."""
    warnings = []
    for i, (name, limit) in enumerate(policy.limits.items()):
        field = f"spec.predicate[{i}]"
        if name not in policy.sync:
            warnings.append(f"{field}: {name} is not in spec.syncPolicy: it has no data and never filters")
        elif limit == 0:
            warnings.append(f"{field}: maxLimitPecent 0 switches the {name} predicate off (as in crane)")
        elif limit > 1:
            warnings.append(f"{field}: maxLimitPecent {limit:g} is a fraction, not a percent: "
                            f"it filters only a node above {limit * 100:g} % {name}")
    for i, name in enumerate(policy.weights):
        if name not in policy.sync:
            warnings.append(f"spec.priority[{i}]: {name} is not in spec.syncPolicy: every node scores it as "
                            "no headroom (its weight stays in the sum, as in crane)")
    if not policy.weights:
        warnings.append("spec.priority: empty: every node scores 0 (as in crane), so load orders nothing")
    elif not any(weight > 0 for weight in policy.weights.values()):
        warnings.append("spec.priority: no weight above 0: every node scores 0 (crane divides 0 by 0 here, "
                        "and a node with a hot value then wraps round to the top score; here it stays 0)")
    if not policy.sync:
        warnings.append("spec.syncPolicy: empty: no metric is annotated, nothing filters and every node scores 0")
    return warnings


def describe(policy: LoadPolicy) -> str:
    """One line of what the policy does, for check-load-policy."""
    formula = ("the seed's: a point per rule with more than `count` bindings in its window"
               if policy.hot_formula == "seed" else "crane's: bindings in the window // count, per rule")
    limits = {name: limit for name, limit in policy.limits.items() if limit > 0 and name in policy.sync}
    return f"filter above {limits}, weights {policy.weights}, hot {policy.hot} ({formula})"


def load_policy_file(path: str | pathlib.Path) -> LoadPolicy:
    """Read a DynamicSchedulerPolicy YAML file; an unreadable or malformed file names the file."""
    try:
        text = pathlib.Path(path).read_text()
    except OSError as error:
        raise PolicyError(str(path), f"cannot read the load policy file: {error.strerror or error}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise PolicyError(str(path), f"not valid YAML: {error}") from None
    try:
        return parse_load_policy(document)
    except PolicyError as error:
        raise PolicyError(f"{path}: {error.field}", error.reason) from None
