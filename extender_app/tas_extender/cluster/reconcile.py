"""What the policies want on the nodes and in their status, as pure functions of plain data.

The controller feeds these what it watched (policies, nodes, the engine's view) and hands what
they return to the writers: node label patches (controller.py), statuses and events (status.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tas_extender.decide.engine import View
from tas_extender.decide.policy import ENFORCEMENT_ANNOTATION, Policy, PolicyError
from tas_extender.decide.strategies import deschedule, labeling

# Which label keys on a node this controller set, so it can remove them when a policy is
# edited or deleted, even across restarts.
MANAGED_ANNOTATION = "telemetry.intel.com/managed-labels"


# --- node labels ---------------------------------------------------------------------------

def managed_keys(annotations: dict[str, str]) -> set[str]:
    """The label keys this controller set on a node (MANAGED_ANNOTATION)."""
    return {k for k in annotations.get(MANAGED_ANNOTATION, "").split(",") if k}


def foreign_labels(have: dict[str, str], annotations: dict[str, str], want: dict[str, str]) -> dict[str, str]:
    """The wanted keys a node already carries that this controller did not set: never overwritten."""
    managed = managed_keys(annotations)
    return {key: have[key] for key in want if key in have and key not in managed}


def label_patch(have: dict[str, str], annotations: dict[str, str],
                want: dict[str, str]) -> dict | None:
    """The strategic merge patch that gives a node the labels it should carry, or None.

    Labels this controller set earlier (listed in MANAGED_ANNOTATION) and no longer wanted are
    removed (null); labels it never set are left alone.
    """
    managed = managed_keys(annotations)
    changes: dict[str, str | None] = {k: v for k, v in want.items() if have.get(k) != v}
    changes.update({k: None for k in managed - set(want) if k in have})
    new_managed = ",".join(sorted(want))
    if not changes and new_managed == ",".join(sorted(managed)):
        return None
    return {"metadata": {"labels": changes, "annotations": {MANAGED_ANNOTATION: new_managed or None}}}


def shadowed_policies(policies: Iterable[Policy]) -> dict[str, str]:
    """Policy key -> why it sets no node label, for policies whose name another namespace's
    policy holds.

    A policy's labels are keyed by its name alone (TAS's contract: pods' node affinity names
    the key), so same-named policies in two namespaces would share them, and one namespace's
    metrics would evict the other's pods. The oldest (then the first namespace) sets them.
    """
    ordered = sorted(policies, key=lambda p: (p.created, p.namespace))
    owners: dict[str, Policy] = {}
    for policy in ordered:
        owners.setdefault(policy.name, policy)
    return {policy.key: (f"policy {owners[policy.name].key} has the same name and is older: it alone sets "
                         f"node label {deschedule.label_key(policy)} and the labels under "
                         f"{labeling.label_prefix(policy)}; this policy sets none until one is renamed or deleted")
            for policy in ordered if owners[policy.name] is not policy}


@dataclass
class Desired:
    """What the policies want on the nodes, and what they are not given."""

    labels: dict[str, dict[str, str]]  # node -> labels the policies want there
    violating: dict[str, list[str]]  # policy key -> nodes violating its deschedule rules
    owners: dict[str, str] = field(default_factory=dict)  # label key -> the policy that wants it
    # policy key -> (reason, message) for each of its labels not set (a Warning event each)
    not_set: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


def desired_labels(view: View, policies: list[Policy], names: list[str]) -> Desired:
    """The labels every enforced policy wants on each of the nodes `names`, the violating nodes
    of every policy (an audit policy's are reported, never labelled), and the policies that set
    none because another namespace's policy holds their name."""
    desired = Desired(labels={n: {} for n in names}, violating={},
                      not_set={key: [("NameTaken", why)] for key, why in shadowed_policies(policies).items()})
    for policy in policies:
        bad = view.violating(policy, names)
        desired.violating[policy.key] = bad
        if policy.audit or policy.key in desired.not_set:
            continue  # audit: the descheduler evicts nothing for it; labels set while enforced go
        for node, labels in view.labels(policy, names, bad).items():
            desired.labels[node].update(labels)
            desired.owners.update(dict.fromkeys(labels, policy.key))
    return desired


# --- policy status: its conditions -------------------------------------------------------

def valid_condition(error: PolicyError | None) -> dict[str, str]:
    """The Valid condition: whether the policy was accepted, or which field is wrong."""
    if error is not None:
        return {"type": "Valid", "status": "False", "reason": "InvalidPolicy",
                "message": f"{error.field}: {error.reason}"}
    return {"type": "Valid", "status": "True", "reason": "Accepted", "message": "policy is valid and in use"}


def violating_condition(policy: Policy, nodes: list[str]) -> dict[str, str]:
    """The Violating condition: whether any node breaks the policy's deschedule rules."""
    if policy.strategy("deschedule") is None:
        return {"type": "Violating", "status": "False", "reason": "NoDescheduleStrategy",
                "message": "the policy has no deschedule strategy"}
    if not nodes:
        return {"type": "Violating", "status": "False", "reason": "NoNodesViolating",
                "message": "no node violates the deschedule rules"}
    return {"type": "Violating", "status": "True", "reason": "NodesViolating",
            "message": f"{len(nodes)} node(s) violate the deschedule rules: {' '.join(nodes)}"}


def _names(nodes: list[str], shown: int = 10) -> str:
    more = f" and {len(nodes) - shown} more" if len(nodes) > shown else ""
    return f": {' '.join(nodes[:shown])}{more}" if nodes else ""


def enforced_condition(policy: Policy, filtered: list[str], violating: list[str],
                       labelled: list[str]) -> dict[str, str]:
    """The Enforced condition of a policy in audit mode: what it would do to the nodes now.

    Only audit policies carry it; the lists are sorted, so the message changes only with them.
    """
    would = []
    if policy.strategy("dontschedule") is not None:
        would.append(f"filter {len(filtered)} node(s) (dontschedule){_names(filtered)}")
    if policy.strategy("deschedule") is not None:
        would.append(f"label {len(violating)} node(s) violating (deschedule){_names(violating)}")
    if policy.strategy("labeling") is not None:
        would.append(f"set labels on {len(labelled)} node(s) (labeling){_names(labelled)}")
    if policy.strategy("scheduleonmetric") is not None:
        would.append("score the nodes (scheduleonmetric)")
    return {"type": "Enforced", "status": "False", "reason": "Audit",
            "message": f"audit mode (annotation {ENFORCEMENT_ANNOTATION}=audit): decisions are reported, "
                       "not enforced; if enforced it would now " + ("; ".join(would) or "do nothing")}


def warning_condition(policy: Policy, shown: int = 5) -> dict[str, str] | None:
    """The Warning condition: the parts of an accepted policy that can never act, or None.

    It names the first `shown` of them; each has its own Event.
    """
    if not policy.warnings:
        return None
    message = "; ".join(str(warning) for warning in policy.warnings[:shown])
    if len(policy.warnings) > shown:
        message += f"; and {len(policy.warnings) - shown} more (see the policy's events)"
    return {"type": "Warning", "status": "True", "reason": "RulesNeverAct", "message": message}


def labels_not_set_condition(reasons: list[tuple[str, str]], shown: int = 5) -> dict[str, str] | None:
    """The LabelsNotSet condition: why some of a valid policy's node labels are not set, or None.

    It names the first `shown` (reason, message) pairs; each has its own Event.
    """
    if not reasons:
        return None
    message = "; ".join(why for _, why in reasons[:shown])
    if len(reasons) > shown:
        message += f"; and {len(reasons) - shown} more (see the policy's events)"
    return {"type": "LabelsNotSet", "status": "True", "reason": reasons[0][0], "message": message}


def with_transitions(conditions: list[dict[str, Any]], old: list[dict[str, Any]], generation: int,
                     now: str) -> list[dict[str, Any]]:
    """`conditions`, each given its lastTransitionTime (the old one while its status stands, else
    `now`) and observedGeneration."""
    previous_by_type = {c.get("type"): c for c in old}
    for entry in conditions:
        previous = previous_by_type.get(entry["type"])
        entry["lastTransitionTime"] = (
            previous["lastTransitionTime"]
            if previous and previous.get("status") == entry["status"] and previous.get("lastTransitionTime")
            else now)
        entry["observedGeneration"] = generation
    return conditions
