"""crane's DynamicSchedulerPolicy: parsing, validation and the defaults of the seed document."""

from __future__ import annotations

import math
import pathlib
import re
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tas_extender.policy import METRIC_NAME, PolicyError

API_VERSION = "scheduler.policy.crane.io/v1alpha1"
KIND = "DynamicSchedulerPolicy"

# Go's time.ParseDuration units, in seconds.
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """A Go duration string (`30s`, `3m`, `1h30m`, `1.5h`) in seconds, as crane's YAML carries it."""
    if not isinstance(text, str):
        raise ValueError(f"must be a duration string such as 3m, got {text!r}")
    body = text.strip()
    if body.startswith("+"):
        body = body[1:]
    if body.startswith("-"):
        raise ValueError(f"{text!r} is negative; a duration must be positive")
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        if not match:
            raise ValueError(f"{text!r} is not a duration such as 30s, 3m, 1h or 1h30m")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos == 0:
        raise ValueError(f"{text!r} is not a duration such as 30s, 3m, 1h or 1h30m")
    return total


def _positive_duration(value: Any) -> float:
    seconds = parse_duration(value)
    if not 0 < seconds < math.inf:
        raise ValueError(f"{value!r} must be longer than zero and finite")
    return seconds


class SyncRule(BaseModel):
    """How often node-annotator refreshes one metric; its annotation is valid for period + 5 min."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=METRIC_NAME)
    period: float

    @field_validator("period", mode="before")
    @classmethod
    def _period(cls, value: Any) -> float:
        return _positive_duration(value)


class PredicateRule(BaseModel):
    """A node whose usage fraction of this metric exceeds the limit takes no new pods."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=METRIC_NAME)
    # crane's spelling, kept so its policy files load unchanged.
    maxLimitPecent: float = Field(gt=0, le=1, strict=True, allow_inf_nan=False)


class PriorityRule(BaseModel):
    """The weight of one metric's headroom in the score."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=METRIC_NAME)
    weight: float = Field(ge=0, strict=True, allow_inf_nan=False)


class HotValueRule(BaseModel):
    """More than `count` bindings to a node within `timeRange` costs it points."""

    model_config = ConfigDict(extra="forbid")

    timeRange: float
    count: int = Field(ge=1, strict=True)

    @field_validator("timeRange", mode="before")
    @classmethod
    def _time_range(cls, value: Any) -> float:
        return _positive_duration(value)


class DynamicSchedulerSpec(BaseModel):
    """A missing section is None here and takes its default later."""

    model_config = ConfigDict(extra="forbid")

    syncPolicy: list[SyncRule] | None = None
    predicate: list[PredicateRule] | None = None
    priority: list[PriorityRule] | None = None
    hotValue: list[HotValueRule] | None = None


class DynamicSchedulerPolicy(BaseModel):
    """The whole document as crane's policy file has it."""

    model_config = ConfigDict(extra="forbid")

    apiVersion: str = API_VERSION
    kind: str = KIND
    metadata: dict[str, Any] | None = None
    spec: DynamicSchedulerSpec | None = None


@dataclass(frozen=True)
class LoadPolicy:
    """A validated policy: metric -> sync period (s), max fraction, weight; hot (window s, count) rules."""

    sync: dict[str, float]
    limits: dict[str, float]
    weights: dict[str, float]
    hot: list[tuple[float, int]]

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
    """A DynamicSchedulerPolicy document to a LoadPolicy; None, {} or a missing section take the defaults."""
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
    spec = parsed.spec or DynamicSchedulerSpec()

    if spec.syncPolicy is None:
        sync = dict(DEFAULT_POLICY.sync)
    else:
        _unique("syncPolicy", [rule.name for rule in spec.syncPolicy])
        sync = {rule.name: rule.period for rule in spec.syncPolicy}

    if spec.predicate is None:
        limits, limits_default = dict(DEFAULT_POLICY.limits), True
    else:
        _unique("predicate", [rule.name for rule in spec.predicate])
        limits, limits_default = {rule.name: rule.maxLimitPecent for rule in spec.predicate}, False

    if spec.priority is None:
        weights, weights_default = dict(DEFAULT_POLICY.weights), True
    else:
        _unique("priority", [rule.name for rule in spec.priority])
        weights, weights_default = {rule.name: rule.weight for rule in spec.priority}, False

    if spec.hotValue is None:
        hot = list(DEFAULT_POLICY.hot)
    else:
        _unique("hotValue", [rule.timeRange for rule in spec.hotValue])
        hot = [(rule.timeRange, rule.count) for rule in spec.hotValue]

    # A metric that is never synced has no annotation: its rule would silently never apply.
    for section, names, is_default in (("predicate", limits, limits_default),
                                       ("priority", weights, weights_default)):
        for i, name in enumerate(names):
            if name not in sync:
                origin = " (from the default section, used because it is omitted)" if is_default else ""
                raise PolicyError(f"spec.{section}[{i}].name",
                                  f"{name!r}{origin} is not in spec.syncPolicy, so it would never have data")
    if not any(weight > 0 for weight in weights.values()):
        raise PolicyError("spec.priority", "at least one weight must be greater than 0")
    return LoadPolicy(sync=sync, limits=limits, weights=weights, hot=hot)


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
