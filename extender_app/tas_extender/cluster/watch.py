"""Watching the API server: list once, then watch from there (`watch_forever`), and the nodes as
the node watch last saw them (`NodeCache`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes import client, watch

from tas_extender.cluster.backoff import Backoff

log = logging.getLogger("tas_extender.cluster.controller")  # the controller's log, as its lines always said

# A watch: its name, the list call (also streamed by the watch), what to do with the listed
# items, and with each event (its type and object).
Watched = tuple[str, Callable[..., Any], Callable[[Any], None], Callable[[str, Any], None]]


def _list_version(listing: Any) -> str:
    if isinstance(listing, dict):
        return listing["metadata"]["resourceVersion"]
    return listing.metadata.resource_version


def watch_forever(name: str, list_fn: Callable, on_list: Callable, on_event: Callable,
                  stop: threading.Event, watch_seconds: int = 300, backoff: Backoff | None = None,
                  sleep: Callable[[float], object] | None = None) -> None:
    """List once, then watch from the last resourceVersion seen; list again only after 410 Gone.

    A watch the server ends (its timeout) or a dropped connection (an API server restart)
    resumes from where it was, so nodes are not listed again every few minutes. Failures are
    retried after `backoff`'s waits (by `sleep`, stop.wait unless given), from its base again
    once a list or an event comes through.
    """
    backoff = backoff or Backoff()
    sleep = sleep or stop.wait
    version: str | None = None
    while not stop.is_set():
        try:
            if version is None:
                listing = list_fn()
                on_list(listing["items"] if isinstance(listing, dict) else listing.items)
                version = _list_version(listing)
                backoff.reset()
            w = watch.Watch()
            for event in w.stream(list_fn, resource_version=version, timeout_seconds=watch_seconds,
                                  allow_watch_bookmarks=True):
                if stop.is_set():
                    w.stop()
                    return
                backoff.reset()
                if event["type"] != "BOOKMARK":
                    on_event(event["type"], event["object"])
                version = w.resource_version or version
        except client.ApiException as error:
            if error.status == 410:
                log.info("%s watch: resourceVersion %s expired; listing again", name, version)
                version = None
            else:
                delay = backoff.next()
                log.warning("%s watch: %s %s; retrying in %.1f s", name, error.status, error.reason, delay)
                sleep(delay)
        except Exception as error:  # noqa: BLE001 - API server restarts: back off and resume
            delay = backoff.next()
            log.warning("%s watch: %s; retrying in %.1f s", name, error, delay)
            sleep(delay)


def start_watches(watches: Iterable[Watched], stop: threading.Event) -> None:
    """Each watch in a thread of its own, until `stop`."""
    for name, list_fn, on_list, on_event in watches:
        threading.Thread(target=watch_forever, name=f"{name}-watch", daemon=True,
                         args=(name, list_fn, on_list, on_event, stop)).start()


def _labels_and_annotations(node: Any) -> tuple[dict[str, str], dict[str, str]]:
    return dict(node.metadata.labels or {}), dict(node.metadata.annotations or {})


def _addresses(node: Any) -> tuple[str, ...]:
    return tuple(a.address for a in (node.status.addresses if node.status else None) or () if a.address)


@dataclass(frozen=True)
class NodeCapacity:
    """A node's status.capacity, and the resourceVersion of the node it was seen in."""

    version: str
    quantities: dict[str, str] | None  # None until the node's kubelet (or its creator) reports any


def _capacity(node: Any) -> NodeCapacity:
    quantities = node.status.capacity if node.status else None
    return NodeCapacity(node.metadata.resource_version or "", dict(quantities) if quantities is not None else None)


class NodeCache:
    """The nodes as the node watch last listed or saw them: labels, annotations, addresses, capacity.

    The one owner of that state: the reconcile reads labels and annotations, the load-aware mode
    annotations, the Prometheus source the addresses (`node_addresses`), the advertiser of the
    extended resource the capacity (`capacities`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[dict[str, str], dict[str, str]]] = {}  # name -> (labels, annotations)
        self._addresses: dict[str, tuple[str, ...]] = {}  # name -> status.addresses, to match `instance` labels
        self._capacity: dict[str, NodeCapacity] = {}  # name -> status.capacity
        self.synced = False  # listed once

    def replace(self, items: list[Any]) -> None:
        """The nodes listed: they replace every node known."""
        with self._lock:
            self._nodes = {n.metadata.name: _labels_and_annotations(n) for n in items}
            self._addresses = {n.metadata.name: _addresses(n) for n in items}
            self._capacity = {n.metadata.name: _capacity(n) for n in items}
        self.synced = True

    def update(self, kind: str, node: Any) -> None:
        """A node ADDED, MODIFIED or DELETED."""
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(node.metadata.name, None)
                self._addresses.pop(node.metadata.name, None)
                self._capacity.pop(node.metadata.name, None)
            else:
                self._nodes[node.metadata.name] = _labels_and_annotations(node)
                self._addresses[node.metadata.name] = _addresses(node)
                self._capacity[node.metadata.name] = _capacity(node)

    def assume(self, name: str, labels: dict[str, str], annotations: dict[str, str]) -> None:
        """What a patch just wrote, until the watch brings the node as the API server has it."""
        with self._lock:
            self._nodes[name] = (labels, annotations)

    def names(self) -> set[str]:
        return set(self._nodes)

    def sorted_names(self) -> list[str]:
        with self._lock:
            return sorted(self._nodes)

    def get(self, name: str) -> tuple[dict[str, str], dict[str, str]] | None:
        """(labels, annotations) of a node, None for one not seen."""
        with self._lock:
            return self._nodes.get(name)

    def annotations(self, node: str) -> dict[str, str] | None:
        entry = self._nodes.get(node)
        return entry[1] if entry else None

    def node_addresses(self) -> dict[str, tuple[str, ...]] | None:
        """node -> its addresses; None until the nodes are listed."""
        with self._lock:
            return dict(self._addresses) if self.synced else None

    def all_annotations(self) -> dict[str, dict[str, str]]:
        with self._lock:
            return {name: annotations for name, (_, annotations) in self._nodes.items()}

    def capacities(self) -> dict[str, NodeCapacity]:
        """node -> its status.capacity as last seen."""
        with self._lock:
            return dict(self._capacity)
