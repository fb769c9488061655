"""The TASPolicy model: the one source of truth for parsing, validation and the CRD schema."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

GROUP = "telemetry.intel.com"
VERSION = "v1alpha1"
KIND = "TASPolicy"
PLURAL = "taspolicies"

Operator = Literal["LessThan", "GreaterThan", "Equals"]
LogicalOperator = Literal["anyOf", "allOf"]
STRATEGIES = ("scheduleonmetric", "dontschedule", "deschedule", "labeling")

# Prometheus metric names, as the custom metrics API and the adapter rules carry them.
METRIC_NAME = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
# A rule's metric name: TAS's CRD pattern (letters, digits, '_', '-': the custom metrics API
# serves names with dashes), plus ':' of recording rules, and empty as TAS's code allows (such a
# rule never has a value). Never '/', '\', '.', spaces or quotes: the name is a path segment of
# the custom metrics API and goes into a PromQL selector.
RULE_METRIC_NAME = r"^[a-zA-Z0-9_:-]*$"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# A label value (and the name part of a key) as Kubernetes accepts it.
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_PREFIX = "telemetry.aware.scheduling."
# A policy's name is the key of the node label its deschedule strategy sets (TAS's contract:
# the pods' node affinity names it), and a label key's name part has at most 63 characters.
MAX_NAME_LENGTH = 63
NAME_LENGTH_WHY = (f"at most {MAX_NAME_LENGTH} characters: the name is the key of the node label "
                   "the deschedule strategy sets, which Kubernetes limits to 63")
# Audit mode is an annotation, not a spec field: TAS's CRD and TAS itself accept the same object
# (TAS ignores the annotation and enforces), and switching needs no schema change.
ENFORCEMENT_ANNOTATION = "telemetry.intel.com/enforcement"
ENFORCEMENTS = ("enforce", "audit")


class Rule(BaseModel):
    """One comparison of a node metric against a target."""

    model_config = ConfigDict(extra="forbid")

    metricname: str = Field(max_length=200, pattern=RULE_METRIC_NAME,
                            description="Metric name as served by the metrics source (empty: never has a value)")
    operator: Operator = Field(description="How the metric is compared with the target")
    target: int = Field(default=0, ge=INT64_MIN, le=INT64_MAX, description="Value the metric is compared with")
    labels: list[str] = Field(default_factory=list, max_length=50,
                              description="key=value node labels (labeling strategy only)")

    def describe(self) -> str:
        return f"{self.metricname} {self.operator} {self.target}"


class Strategy(BaseModel):
    """Rules combined by a logical operator."""

    model_config = ConfigDict(extra="forbid")

    rules: list[Rule] = Field(max_length=100)
    logicalOperator: LogicalOperator = Field(default="anyOf")
    policyName: str | None = Field(default=None, max_length=253,
                                   description="Ignored: TAS fills it in with the policy's name")


class PolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # A map, as in TAS's CRD: a name that is not one of STRATEGIES is kept and reported, not refused.
    strategies: dict[str, Strategy] = Field(
        description="Strategies by name: scheduleonmetric, dontschedule, deschedule, labeling")


class PolicyError(ValueError):
    """A policy that cannot be used, with the field at fault and the reason."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class PolicyWarning:
    """A part of an accepted policy that can never act: kept, and reported with the reason."""

    field: str  # spec.strategies.labeling.rules[1]
    reason: str  # CamelCase, the reason of the Event that reports it
    message: str  # names the policy, the strategy, the rule and why

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class Policy:
    """A validated policy, identified by namespace and name."""

    namespace: str
    name: str
    spec: PolicySpec
    generation: int = 0
    warnings: tuple[PolicyWarning, ...] = ()
    created: str = ""  # metadata.creationTimestamp: the oldest of same-named policies owns their labels
    enforcement: str = "enforce"  # one of ENFORCEMENTS

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def audit(self) -> bool:
        """Decisions are computed and reported, never enforced (no filtering, scores or labels)."""
        return self.enforcement == "audit"

    def strategy(self, name: str) -> Strategy | None:
        """One of STRATEGIES, or None when the policy lacks it; other names are never used."""
        return self.spec.strategies.get(name) if name in STRATEGIES else None

    def metric_names(self) -> set[str]:
        """The metrics to fetch; an empty name is never fetched (it never has a value)."""
        return {rule.metricname for name in STRATEGIES if (s := self.strategy(name))
                for rule in s.rules if rule.metricname}


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
    return parsed


def label_problem(item: str) -> str | None:
    """Why a labeling rule's `key=value` cannot become a node label, or None when it can."""
    key, sep, value = item.partition("=")
    if not sep or "=" in value:
        return f"label {_short(item)} is not of the form key=value"
    if len(key) > 63 or not _LABEL_NAME.match(key):
        return f"label key {_short(key)} is not a valid label name"
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return f"label value {_short(value)} is not a valid label value"
    return None


def label_prefix_problem(policy_name: str) -> str | None:
    """Why telemetry.aware.scheduling.<policy> cannot prefix a label key, or None when it can."""
    domain = LABEL_PREFIX + policy_name
    if len(domain) > 253 or not _DNS_SUBDOMAIN.match(domain):
        return f"label prefix {_short(domain)} is not a DNS subdomain of at most 253 characters"
    return None


# What a strategy whose rules can never be broken never does.
_NEVER = {
    "scheduleonmetric": "every node scores 0",
    "dontschedule": "it never filters a node",
    "deschedule": "it never labels a node violating",
    "labeling": "it never labels a node",
}


def _rule_text(kind: str, index: int, rule: Rule) -> str:
    return f"{kind} rule {index} ({rule.metricname or '<empty metric name>'} {rule.operator} {rule.target})"


def policy_warnings(name: str, spec: PolicySpec) -> tuple[PolicyWarning, ...]:
    """The parts of an accepted policy that can never act; TAS accepts them as well."""
    found: list[PolicyWarning] = []

    def warn(field: str, reason: str, message: str) -> None:
        found.append(PolicyWarning(field, reason, f"policy {name}: {message}"))

    if not spec.strategies:
        warn("spec.strategies", "NoStrategy", "no strategy: the policy never filters, scores or labels a node")
    for kind, strategy in spec.strategies.items():
        path = f"spec.strategies.{kind}"
        if kind not in STRATEGIES:
            warn(path, "UnknownStrategy", f"strategy {_short(kind)} is none of {', '.join(STRATEGIES)}: it is ignored")
            continue
        if not strategy.rules:
            warn(f"{path}.rules", "NoRules", f"{kind} has no rules: {_NEVER[kind]}")
        all_of = strategy.logicalOperator == "allOf"
        for i, rule in enumerate(strategy.rules):
            if not rule.metricname:
                why = ("it is left out of the scores" if kind == "scheduleonmetric"
                       else f"with allOf the whole {kind} strategy is never violated" if all_of
                       else "it is never broken")
                warn(f"{path}.rules[{i}].metricname", "EmptyMetricName",
                     f"{_rule_text(kind, i, rule)} has an empty metric name, which never has a value: {why}")
    labeling = spec.strategies.get("labeling")
    if labeling is not None:
        for field, reason, message in _labeling_problems(name, labeling):
            warn(field, reason, message)
    return tuple(found)


def _labeling_problems(name: str, strategy: Strategy) -> Iterator[tuple[str, str, str]]:
    """(field, reason, message) for the labels a labeling strategy can never set as written."""
    path = "spec.strategies.labeling"
    if (problem := label_prefix_problem(name)) is not None:
        yield path, "InvalidLabel", f"{problem}: the labeling strategy never sets a label"
    first_claim: dict[str, tuple[int, str]] = {}  # label key -> (rule index, operator)
    for i, rule in enumerate(strategy.rules):
        rule_path, text = f"{path}.rules[{i}]", _rule_text("labeling", i, rule)
        if not rule.labels:
            still = " (it still counts toward allOf)" if strategy.logicalOperator == "allOf" else ""
            yield f"{rule_path}.labels", "NoLabels", f"{text} has no labels: breaking it sets no label{still}"
        for j, item in enumerate(rule.labels):
            if (problem := label_problem(item)) is not None:
                yield f"{rule_path}.labels[{j}]", "InvalidLabel", f"{text}: {problem}; it is never set"
                continue
            key = item.partition("=")[0]
            claim = first_claim.setdefault(key, (i, rule.operator))
            if claim[0] != i and claim[1] != rule.operator:
                yield (f"{rule_path}.labels[{j}]", "MixedLabelOperators",
                       f"labeling rules {claim[0]} and {i} set label key {key!r} with different operators "
                       f"({claim[1]}, {rule.operator}): when both are broken TAS sets none of the policy's "
                       f"labels on that node; here the first of them that is broken sets it")


def enforcement_of(meta: dict) -> str:
    """One of ENFORCEMENTS, from the policy's annotation; absent or empty: enforce."""
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise PolicyError("metadata.annotations", "must be an object")
    value = annotations.get(ENFORCEMENT_ANNOTATION) or "enforce"
    if value not in ENFORCEMENTS:
        raise PolicyError(f"metadata.annotations.{ENFORCEMENT_ANNOTATION}",
                          f"must be one of {', '.join(ENFORCEMENTS)}, got {_short(value)}")
    return value


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
    if len(name) > MAX_NAME_LENGTH:
        raise PolicyError("metadata.name", f"is {len(name)} characters long; {NAME_LENGTH_WHY}")
    namespace = meta.get("namespace") or "default"
    generation = meta.get("generation") or 0
    if not isinstance(generation, int) or isinstance(generation, bool):
        raise PolicyError("metadata.generation", f"must be an integer, got {_short(generation)}")
    enforcement = enforcement_of(meta)
    spec = parse_spec(obj.get("spec"))
    created = meta.get("creationTimestamp") or ""
    return Policy(namespace=namespace, name=name, spec=spec, generation=generation,
                  warnings=policy_warnings(name, spec), enforcement=enforcement, created=str(created))


def _short(value: object, limit: int = 80) -> str:
    """repr() cut to `limit` characters: reasons end up in logs and status conditions."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"
