"""Which node a Prometheus series is about, read from the labels a user's monitoring gives it.

A `node` label names the node (this collection's rules and TAS's relabelling write one).
Without it, the scrape target's `instance` does, as crane's recording rules keep it
(`avg by (instance)`): the node's name or one of its addresses, bare or with a port
(`node-1`, `10.0.0.1:9100`, `[fd00::1]:9100`). crane's annotator matches the same way, by the
node's IP with and without a port.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

# node name -> its addresses (InternalIP, ExternalIP, Hostname, ...), as the API lists them;
# None while the nodes are not listed yet.
NodeAddresses = Callable[[], Mapping[str, Iterable[str]] | None]


def instance_host(instance: str) -> str:
    """The host part of an `instance` label: `10.0.0.1:9100` -> `10.0.0.1`, `[fd00::1]:9100` ->
    `fd00::1`; a bare name or address (IPv6 included) is its own host."""
    if instance.startswith("["):
        host, bracket, _ = instance[1:].partition("]")
        return host if bracket else instance
    host, colon, port = instance.rpartition(":")
    if colon and port.isdigit() and ":" not in host:
        return host
    return instance


def _canonical(address: str) -> str:
    """One spelling per IP address (`fd00:0::1` and `fd00::1` are the same node); names as given."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


@dataclass(frozen=True)
class Match:
    node: str | None
    tried: str  # how the node was found, or why none was: for the report


class NodeMatcher:
    """Series labels -> node, against the nodes the API lists (names and addresses)."""

    def __init__(self, addresses: Mapping[str, Iterable[str]] | None):
        # None: no node list (files and a Prometheus URL, no cluster); the host is taken as the name.
        self.known = addresses is not None
        self.names = set(addresses or ())
        owners: dict[str, set[str]] = {}
        for node, node_addresses in (addresses or {}).items():
            for address in node_addresses:
                owners.setdefault(_canonical(address), set()).add(node)
        # An address two nodes report (a shared ExternalIP, a load balancer) names neither.
        self.by_address = {address: next(iter(nodes)) for address, nodes in owners.items() if len(nodes) == 1}

    def match(self, labels: Mapping[str, object]) -> Match:
        node = labels.get("node")
        if isinstance(node, str) and node:
            return Match(node, "node label")
        instance = labels.get("instance")
        if not isinstance(instance, str) or not instance:
            return Match(None, "it has neither a node nor an instance label")
        host = instance_host(instance)
        if not self.known:
            return Match(host, "instance label as the node's name (no node list)")
        if host in self.names:
            return Match(host, "instance label as the node's name")
        owner = self.by_address.get(_canonical(host))
        if owner is not None:
            return Match(owner, f"instance label as {owner}'s address")
        return Match(None, f"its instance {instance!r} is neither the name nor an address of any of the "
                           f"{len(self.names)} nodes (tried {host!r} as a name and as an address)")
