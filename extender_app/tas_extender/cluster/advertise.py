"""The extended resource that sends a pod to the extender (`telemetry/scheduling`), kept in every
node's status.capacity by the leader, so that a node added after the install (an autoscaler's)
can take opted-in pods too.

kube-scheduler calls the extender only for pods that request the resource (its `managedResources`),
and places such a pod only on a node that advertises it. Advertising means what Kubernetes' docs
show for extended resources: a JSON patch of the node's status subresource adding
`/status/capacity/<name>`; the kubelet copies capacity into allocatable. A node holding zero of it
counts as lacking it: that is what a kubelet writes on a node it registers again after the node
was re-created (it zeroes every extended resource until something advertises it again). Any other
value is someone's and is left as it is.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI parses --advertise-resource without loading the Kubernetes client
    from prometheus_client import Counter

    from tas_extender.cluster.watch import NodeCapacity

log = logging.getLogger(__name__)

# A qualified name with a DNS subdomain prefix (Kubernetes' IsQualifiedName).
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
# An extended resource is counted in whole units: a whole number, with a decimal or binary suffix.
_WHOLE_QUANTITY = re.compile(r"[0-9]+(k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
# Any spelling of zero the API server may hold: 0, 0k, 0.0, 0e3, 0Mi.
_ZERO = re.compile(r"[+-]?[0.]*([eE][+-]?[0-9]+)?[A-Za-z]*")

# Nodes patched in one sync round at most, so that a first round on a large cluster where no node
# advertises the resource yet does not hold up the metric refresh; the rest follow in later rounds.
PER_ROUND = 100


@dataclass(frozen=True)
class ExtendedResource:
    """The resource and the quantity each node advertises (`--advertise-resource NAME=QUANTITY`)."""

    name: str
    quantity: str

    @classmethod
    def parse(cls, text: str) -> ExtendedResource:
        """`NAME=QUANTITY`, checked as the API server checks an extended resource's name, with a
        whole quantity of at least 1; ValueError says what is wrong."""
        name, equals, quantity = text.partition("=")
        if not equals:
            raise ValueError(f"{text!r} is not NAME=QUANTITY (telemetry/scheduling=1000)")
        prefix, slash, short = name.partition("/")
        if (not slash or not _PREFIX.fullmatch(prefix) or len(f"requests.{prefix}") > 253
                or not _NAME.fullmatch(short) or len(short) > 63):
            raise ValueError(f"{name!r} is not an extended resource name: a domain, a slash and a name "
                             "(telemetry/scheduling)")
        if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io") or prefix.startswith("requests."):
            raise ValueError(f"{name!r} is in a namespace Kubernetes keeps for its own resources")
        if not _WHOLE_QUANTITY.fullmatch(quantity) or is_zero(quantity):
            raise ValueError(f"quantity {quantity!r} is not a whole number of at least 1 (1000, 1k)")
        return cls(name, quantity)

    def __str__(self) -> str:
        return f"{self.name}={self.quantity}"


DEFAULT = ExtendedResource("telemetry/scheduling", "1000")


def is_zero(quantity: str) -> bool:
    return bool(_ZERO.fullmatch(quantity))


def lacking(capacities: Mapping[str, NodeCapacity], name: str) -> list[str]:
    """The nodes, sorted, whose capacity lacks `name` or holds zero of it. A node that reports no
    capacity at all is left until its kubelet does: a patch can add a key to the capacity, not
    make the capacity."""
    return sorted(node for node, seen in capacities.items()
                  if seen.quantities is not None and is_zero(seen.quantities.get(name, "0")))


def capacity_patch(resource: ExtendedResource, version: str) -> list[dict[str, str]]:
    """The JSON patch of a node's status that advertises `resource`. It applies only to the node
    as it was seen (its resourceVersion): a value another writer set since is never overwritten."""
    pointer = resource.name.replace("~", "~0").replace("/", "~1")
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "add", "path": f"/status/capacity/{pointer}", "value": resource.quantity}]


def api_error(error: Exception) -> str:
    """An API error as `<status> <reason>: <the server's message>` (an admission policy's says why)."""
    status = getattr(error, "status", None)
    if status is None:
        return str(error) or type(error).__name__
    message = ""
    try:
        message = json.loads(getattr(error, "body", None) or "{}").get("message", "")
    except (ValueError, AttributeError):
        pass
    return f"{status} {getattr(error, 'reason', '')}".strip() + (f": {message}" if message else "")


class Advertiser:
    """Gives every node that lacks the extended resource the configured quantity; the controller
    calls `sync` each sync round while it leads. A failed patch is tried again next round."""

    def __init__(self, resource: ExtendedResource, capacities: Callable[[], Mapping[str, NodeCapacity]],
                 patch: Callable[[str, list[dict[str, str]]], object], patches: Counter,
                 per_round: int = PER_ROUND):
        self.resource, self.capacities, self.patch, self.per_round = resource, capacities, patch, per_round
        self.added, self.failed = patches.labels("added"), patches.labels("failed")
        # node -> the resourceVersion it was patched from: skipped until the watch brings it anew
        self._patched: dict[str, str] = {}
        self._failing: dict[str, str] = {}  # node -> why its last patch failed, warned once

    def sync(self) -> int:
        """Patch the nodes that lack the resource (at most `per_round`); returns how many were given it."""
        seen = self.capacities()
        self._patched = {node: version for node, version in self._patched.items()
                         if node in seen and seen[node].version == version}
        self._failing = {node: why for node, why in self._failing.items() if node in seen}
        due = [node for node in lacking(seen, self.resource.name) if node not in self._patched]
        given = 0
        for node in due[:self.per_round]:
            version = seen[node].version
            try:
                self.patch(node, capacity_patch(self.resource, version))
            except Exception as error:  # noqa: BLE001 - one node failing must not stop the others or the round
                self.failed.inc()
                why = api_error(error)
                if self._failing.get(node) != why:
                    log.warning("%s: advertising %s failed (%s); trying again each sync round",
                                node, self.resource, why)
                else:
                    log.debug("%s: advertising %s failed again (%s)", node, self.resource, why)
                self._failing[node] = why
                continue
            self.added.inc()
            self._patched[node] = version
            self._failing.pop(node, None)
            given += 1
            log.info("%s: advertised %s in status.capacity", node, self.resource)
        return given
