"""The TASPolicy CustomResourceDefinition, generated from the pydantic model in policy.py."""

from __future__ import annotations

from typing import Any

from tas_extender.decide.policy import (
    GROUP,
    INT64_MAX,
    INT64_MIN,
    KIND,
    MAX_NAME_LENGTH,
    NAME_LENGTH_WHY,
    PLURAL,
    VERSION,
    PolicySpec,
)

_DROP = {"title"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """Inline $refs and turn pydantic's JSON schema into a structural OpenAPI v3 schema."""
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _structural(defs[node["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in node:  # Optional[X] -> X; an absent field stands for None
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        merged = {k: v for k, v in node.items() if k not in ("anyOf", "default")}
        return {**_structural(options[0], defs), **_structural(merged, defs)}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or key == "$defs":
            continue
        if key == "additionalProperties" and isinstance(value, bool):
            continue  # extra="forbid": CRD schemas forbid it beside properties (unknown fields are pruned)
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        else:
            out[key] = _structural(value, defs)
    if out.get("type") == "integer" and (out.get("minimum"), out.get("maximum")) == (INT64_MIN, INT64_MAX):
        # The API server reads bounds as float64, where int64's limits are not integers; it
        # refuses such a schema. `format: int64` says the same, as TAS's own CRD does.
        del out["minimum"], out["maximum"]
        out["format"] = "int64"
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "properties" in out:
        out.setdefault("type", "object")
    return out


def spec_schema() -> dict[str, Any]:
    raw = PolicySpec.model_json_schema()
    return _structural(raw, raw.get("$defs", {}))


def status_schema() -> dict[str, Any]:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer"},
        },
    }
    return {
        "type": "object",
        "properties": {
            "conditions": {"type": "array", "items": condition,
                           "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
            "violatingNodes": {"type": "array", "items": {"type": "string"}},
            "lastEvaluated": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer"},
        },
    }


def crd() -> dict[str, Any]:
    """The CRD manifest, as `tas-extender crd` prints it."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL,
                      "singular": KIND.lower(), "shortNames": ["tasp"]},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Valid", "type": "string",
                     "jsonPath": '.status.conditions[?(@.type=="Valid")].status'},
                    {"name": "Warning", "type": "string",
                     "jsonPath": '.status.conditions[?(@.type=="Warning")].status'},
                    {"name": "Violating", "type": "string", "jsonPath": ".status.violatingNodes"},
                    {"name": "Evaluated", "type": "date", "jsonPath": ".status.lastEvaluated"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "required": ["spec"],
                    # The API server refuses the name at apply (CEL sees metadata.name at the root).
                    "x-kubernetes-validations": [{
                        "rule": f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
                        "message": f"metadata.name is too long: {NAME_LENGTH_WHY}",
                    }],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema(),
                        "status": status_schema(),
                    },
                }},
            }],
        },
    }
