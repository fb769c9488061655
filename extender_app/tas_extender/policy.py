"""The TASPolicy model: the one source of truth for parsing, validation and the CRD schema."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

GROUP = "telemetry.intel.com"
VERSION = "v1alpha1"
KIND = "TASPolicy"
PLURAL = "taspolicies"

Operator = Literal["LessThan", "GreaterThan", "Equals"]
LogicalOperator = Literal["anyOf", "allOf"]
STRATEGIES = ("scheduleonmetric", "dontschedule", "deschedule", "labeling")

# Prometheus metric names, as the custom metrics API and the adapter rules carry them.
METRIC_NAME = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
# A label value (and the name part of a key) as Kubernetes accepts it.
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


class Rule(BaseModel):
    """One comparison of a node metric against a target."""

    model_config = ConfigDict(extra="forbid")

    metricname: str = Field(min_length=1, max_length=200, pattern=METRIC_NAME,
                            description="Metric name as served by the metrics source")
    operator: Operator = Field(description="How the metric is compared with the target")
    target: int = Field(default=0, description="Value the metric is compared with")
    labels: list[Annotated[str, StringConstraints(pattern=r"^[^=]+=[^=]*$")]] = Field(
        default_factory=list, max_length=50,
                              description="key=value node labels (labeling strategy only)")

    @field_validator("labels")
    @classmethod
    def _labels_are_key_value(cls, labels: list[str]) -> list[str]:
        for item in labels:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"label {_short(item)} is not of the form key=value")
            if len(key) > 63 or not _LABEL_NAME.match(key):
                raise ValueError(f"label key {_short(key)} is not a valid label name")
            if len(value) > 63 or not _LABEL_VALUE.match(value):
                raise ValueError(f"label value {_short(value)} is not a valid label value")
        return labels

    def describe(self) -> str:
        return f"{self.metricname} {self.operator} {self.target}"


class Strategy(BaseModel):
    """Rules combined by a logical operator."""

    model_config = ConfigDict(extra="forbid")

    rules: list[Rule] = Field(min_length=1, max_length=100)
    logicalOperator: LogicalOperator = Field(default="anyOf")


class Strategies(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scheduleonmetric: Strategy | None = None
    dontschedule: Strategy | None = None
    deschedule: Strategy | None = None
    labeling: Strategy | None = None

    @model_validator(mode="after")
    def _at_least_one(self) -> Strategies:
        if not any(getattr(self, name) for name in STRATEGIES):
            raise ValueError(f"at least one strategy of {', '.join(STRATEGIES)} is required")
        return self


class PolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    strategies: Strategies


class PolicyError(ValueError):
    """A policy that cannot be used, with the field at fault and the reason."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class Policy:
    """A validated policy, identified by namespace and name."""

    namespace: str
    name: str
    spec: PolicySpec
    generation: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def strategy(self, name: str) -> Strategy | None:
        return getattr(self.spec.strategies, name)

    def metric_names(self) -> set[str]:
        return {rule.metricname for name in STRATEGIES if (s := self.strategy(name)) for rule in s.rules}


def _field_path(location: tuple[Any, ...]) -> str:
    path = "spec"
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def parse_spec(spec: Any) -> PolicySpec:
    """Validate a policy's spec; raise PolicyError naming the first field at fault."""
    if not isinstance(spec, dict):
        raise PolicyError("spec", "must be an object")
    try:
        parsed = PolicySpec.model_validate(spec)
    except ValidationError as error:
        first = error.errors()[0]
        raise PolicyError(_field_path(first["loc"]), first["msg"]) from None
    # What the schema alone cannot say.
    labeling = parsed.strategies.labeling
    if labeling:
        for i, rule in enumerate(labeling.rules):
            if not rule.labels:
                raise PolicyError(f"spec.strategies.labeling.rules[{i}].labels",
                                  "a labeling rule needs at least one key=value label")
    return parsed


def parse_policy(obj: Any) -> Policy:
    """A TASPolicy object (as the API server or a YAML file has it) to a Policy."""
    if not isinstance(obj, dict):
        raise PolicyError("<root>", "a TASPolicy must be an object")
    if obj.get("kind", KIND) != KIND:
        raise PolicyError("kind", f"expected {KIND}, got {obj.get('kind')!r}")
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        raise PolicyError("metadata", "must be an object")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise PolicyError("metadata.name", "is required")
    namespace = meta.get("namespace") or "default"
    generation = meta.get("generation") or 0
    if not isinstance(generation, int) or isinstance(generation, bool):
        raise PolicyError("metadata.generation", f"must be an integer, got {_short(generation)}")
    return Policy(namespace=namespace, name=name, spec=parse_spec(obj.get("spec")), generation=generation)


def _short(value: object, limit: int = 80) -> str:
    """repr() cut to `limit` characters: reasons end up in logs and status conditions."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"
