"""Decisions for the scheduler's requests, from the policy store and the latest snapshot.

The dontschedule verdict of every known node is computed once per sync (or policy change),
so a request costs a dictionary lookup per node; scores depend on the candidate set and are
computed per request.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from tas_extender.decide.cache import MetricCache
from tas_extender.decide.metrics import Snapshot
from tas_extender.decide.policy import Policy
from tas_extender.decide.store import PolicyStore
from tas_extender.decide.strategies import deschedule, dontschedule, labeling, scheduleonmetric

POLICY_LABEL = "telemetry-policy"
_has_reason = operator.itemgetter(1)


@dataclass(frozen=True)
class View:
    snapshot: Snapshot = field(default_factory=Snapshot)
    evaluated: frozenset[str] = frozenset()
    failed: dict[str, dict[str, str]] = field(default_factory=dict)  # policy key -> node -> reason

    def scores(self, policy: Policy, nodes: Sequence[str]) -> list[int]:
        """The policy's scores (scheduleonmetric), in the order of `nodes`."""
        return scheduleonmetric.score_list(policy, self.snapshot, nodes)

    def violating(self, policy: Policy, nodes: Iterable[str]) -> list[str]:
        """Sorted names of the nodes that break the policy's deschedule rules."""
        return deschedule.violating_nodes(policy, self.snapshot, nodes)

    def labels(self, policy: Policy, nodes: Iterable[str], violating: Iterable[str]) -> dict[str, dict[str, str]]:
        """Node -> the labels the policy puts there: `<policy>=violating` on its `violating`
        nodes (deschedule), then those of its labeling rules."""
        wanted = {node: {deschedule.label_key(policy): deschedule.VIOLATING} for node in violating}
        for node, labels in labeling.node_labels(policy, self.snapshot, nodes).items():
            wanted.setdefault(node, {}).update(labels)
        return wanted


class Engine:
    def __init__(self, store: PolicyStore, cache: MetricCache, fail_closed: bool = False):
        self.store = store
        self.cache = cache
        self.fail_closed = fail_closed
        self.known_nodes: set[str] = set()  # from the node watch, when there is a cluster
        self.view = View()
        self._policies: list[Policy] | None = None  # those the view was built with
        self._lock = threading.Lock()
        store.listeners.append(self.rebuild)

    @classmethod
    def offline(cls, policies: Iterable[Policy], snapshot: Snapshot, nodes: Iterable[str] = (),
                fail_closed: bool = False) -> Engine:
        """An engine over given policies and one given snapshot, nothing fetched or watched: what
        `evaluate` and `explain` decide with, through the same Decider the server answers with."""
        store = PolicyStore()
        store.replace_all(list(policies), {})
        cache = MetricCache(_Given(), float("inf"))
        cache.snapshot = snapshot
        engine = cls(store, cache, fail_closed)
        engine.known_nodes = set(nodes)
        engine.rebuild()
        return engine

    def rebuild(self) -> View:
        """The view of the latest snapshot, nodes and policies. When none of them has changed
        since the last view (most syncs: a value is scraped again as it was), that view stands,
        and so do the answers reused on it: evaluating every rule on every node again would hold
        the interpreter from the requests for nothing."""
        with self._lock:
            snapshot = self.cache.snapshot
            nodes = frozenset(snapshot.nodes | self.known_nodes)
            policies = self.store.policies()
            if (self._policies == policies and nodes == self.view.evaluated
                    and snapshot.values == self.view.snapshot.values):
                return self.view
            failed = {p.key: dontschedule.failed_nodes(p, snapshot, nodes, self.fail_closed)
                      for p in policies if p.strategy("dontschedule")}
            self.view, self._policies = View(snapshot, nodes, failed), policies
            return self.view

    def policy_for(self, pod_metadata: Mapping[str, Any]) -> Policy | None:
        """The pod's policy: named by its telemetry-policy label, in its namespace."""
        name = (pod_metadata.get("labels") or {}).get(POLICY_LABEL)
        if not name:
            return None
        return self.store.get(pod_metadata.get("namespace") or "default", name)

    def failed(self, policy: Policy, nodes: Sequence[str]) -> dict[str, str]:
        """Node -> reason for the nodes among `nodes` that the policy filters out."""
        view = self.view
        table = view.failed.get(policy.key)
        if table is None:
            return {}
        # map/filter/zip keep the per-node work in C: this is the request's hot loop. The filter
        # drops the nodes without a reason, which mypy cannot follow through itemgetter.
        result = cast(dict[str, str], dict(filter(_has_reason, zip(nodes, map(table.get, nodes), strict=True))))
        if not view.evaluated.issuperset(nodes):  # nodes the last sync did not know: decide now
            unknown = [n for n in nodes if n not in view.evaluated]
            result.update(dontschedule.failed_nodes(policy, view.snapshot, unknown, self.fail_closed))
        return result

    def scores(self, policy: Policy, nodes: Sequence[str]) -> list[int]:
        """Scores in the order of `nodes`."""
        return self.view.scores(policy, nodes)


class _Given:
    """The metric source of an offline engine, whose snapshot is given: nothing to fetch."""

    name = "given"

    def fetch(self, metrics: set[str]) -> dict[str, dict]:
        raise RuntimeError("an offline engine fetches nothing: its snapshot is given")
