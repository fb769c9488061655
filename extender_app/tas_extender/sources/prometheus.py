"""The Prometheus HTTP API: an instant query per metric, each series matched to a node by its
`node` label or, without one, its `instance` (see sources/nodes.py)."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator, Mapping

import httpx

from tas_extender.decide.metrics import Sample
from tas_extender.sources.nodes import NodeAddresses, NodeMatcher

log = logging.getLogger(__name__)
_PROMETHEUS_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _query(name: str) -> str:
    """The instant query for one metric: by node where series carry one, else by instance. A name
    PromQL cannot write bare (TAS allows dashes and leading digits) goes in a __name__ matcher;
    rules only allow [A-Za-z0-9_:-]."""
    def selector(node: str) -> str:
        if _PROMETHEUS_NAME.match(name):
            return f'{name}{{node{node}""}}'
        return f'{{__name__="{name}",node{node}""}}'

    return f"max by (node) ({selector('!=')}) or max by (instance) ({selector('=')})"


def _series(metric: str, result: object, report: _Reporter) -> Iterator[tuple[Mapping[str, object], Sample]]:
    """(labels, sample) of each usable series of one answer; the rest reported."""
    for series in result if isinstance(result, list) else []:
        labels = series.get("metric") if isinstance(series, dict) else None
        if not isinstance(labels, dict):
            report(metric, ("malformed", repr(series)), f"ignoring malformed series for {metric}: {series!r}")
            continue
        try:
            stamp, value = float(series["value"][0]), float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            report(metric, ("malformed", repr(labels)), f"ignoring malformed series for {metric}: {series!r}")
            continue
        if not math.isfinite(value) or not math.isfinite(stamp):
            report(metric, ("not finite", repr(labels)),
                   f"ignoring {metric}{labels}: value {value} at {stamp} is not a finite number")
            continue
        yield labels, Sample(value, stamp)


class _Reporter:
    """Logs each problem once per metric and kind, not once per sync round."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, tuple[str, str]]] = set()

    def __call__(self, metric: str, key: tuple[str, str], message: str) -> None:
        if (metric, key) not in self.seen:
            self.seen.add((metric, key))
            log.warning("%s", message)


def by_node(metric: str, result: object, matcher: NodeMatcher, report: _Reporter) -> dict[str, Sample]:
    """node -> Sample of one query's answer. Two series that land on one node with different
    values give it none, since which is true is unknown."""
    out: dict[str, tuple[Sample, Mapping[str, object]]] = {}
    conflicting: set[str] = set()
    for labels, sample in _series(metric, result, report):
        match = matcher.match(labels)
        if match.node is None:
            report(metric, ("no node", repr(labels)), f"ignoring series {metric}{labels}: {match.tried}")
            continue
        if match.node in conflicting:
            continue
        seen = out.get(match.node)
        if seen is None:
            out[match.node] = (sample, labels)
            continue
        if seen[0].value != sample.value:
            report(metric, ("two series", match.node),
                   f"ignoring {metric} for node {match.node!r}: two series, {seen[1]} and {labels} "
                   f"(found by {match.tried}), have conflicting values {seen[0].value} and {sample.value}")
            del out[match.node]
            conflicting.add(match.node)
        else:
            report(metric, ("two series", match.node),
                   f"{metric} for node {match.node!r} comes from two series, {seen[1]} and {labels} "
                   f"(found by {match.tried}); they agree ({sample.value}), the newer is used")
            if sample.timestamp > seen[0].timestamp:
                out[match.node] = (sample, labels)
    return {node: sample for node, (sample, _) in out.items()}


class PrometheusSource:
    name = "prometheus"

    def __init__(self, url: str, metric_prefix: str = "node_", timeout: float = 5.0,
                 transport: httpx.BaseTransport | None = None, node_addresses: NodeAddresses | None = None):
        self.client = httpx.Client(base_url=url.rstrip("/"), timeout=timeout, transport=transport)
        self.prefix = metric_prefix
        # Set once the cluster's nodes are watched.
        self.node_addresses = node_addresses
        self._report = _Reporter()

    def fetch(self, metrics: set[str]) -> dict[str, dict[str, Sample]]:
        # Until the nodes are listed (or without a cluster) an instance's host is taken as the node's name.
        matcher = NodeMatcher(self.node_addresses() if self.node_addresses else None)
        out: dict[str, dict[str, Sample]] = {}
        for metric in sorted(metrics):
            # Policies name the metric as the adapter serves it (health_metric for node_health_metric).
            response = self.client.get("/api/v1/query", params={"query": _query(self.prefix + metric)})
            response.raise_for_status()
            data = response.json().get("data")
            out[metric] = by_node(metric, data.get("result") if isinstance(data, dict) else None,
                                  matcher, self._report)
        return out
