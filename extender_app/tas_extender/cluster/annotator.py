"""The node annotator: each node's load values written into its annotations, as crane's annotator does.

Every metric of the load policy's syncPolicy is queried from Prometheus (percent, the recording
rules') on its own period and written as `<metric>: "<fraction, 5 decimals>,<UTC time>Z"`, with
the node's hot value as `node_hot_value: "<points>,<UTC time>Z"`, so crane's scheduler can read
them too. The keys written are listed in MANAGED_KEY so that turning the mode off removes
exactly them. Only the leader annotates.

A metric that Prometheus could not be asked for, or that lacks a series for a node that has series
of other load metrics (a recording rule not yet evaluated after an install or a Prometheus
restart, or evaluated while one node's exporter had a single scrape), is asked again within RETRY
seconds rather than after its whole period (3 min for the 5-minute averages, 3 h for crane's
1-day maximum): a priority metric without data counts as no headroom, so such a node would score
far below its load for that long. crane's annotator does much the same, asking per node and
metric and retrying one without data after 10 s, doubling up to 6 min. Nodes that never had a
series of any load metric (not scraped, as control planes often are) are not waited for; crane
keeps asking for them every 6 min.
"""

from __future__ import annotations

import datetime
import logging
import math
import time
from collections.abc import Callable, Mapping

from tas_extender.decide.load.annotations import HOT_VALUE_KEY, format_hot_value, format_value
from tas_extender.decide.load.policy import LoadPolicy
from tas_extender.decide.metrics import MetricSource

log = logging.getLogger(__name__)

MANAGED_KEY = "telemetry.intel.com/load-annotations"

Nodes = Callable[[], Mapping[str, Mapping[str, str]]]  # node name -> its annotations
HotValue = Callable[[str], int]  # node name -> its hot points now

RETRY = 10.0  # seconds: when a failed query or a metric with no series is asked again


def cleanup_patches(nodes: Mapping[str, Mapping[str, str]]) -> dict[str, dict]:
    """node -> the patch that removes every load annotation this mode wrote there."""
    patches = {}
    for node, present in nodes.items():
        keys = [k for k in present.get(MANAGED_KEY, "").split(",") if k]
        if MANAGED_KEY in present:
            patches[node] = {"metadata": {"annotations": {**{k: None for k in keys}, MANAGED_KEY: None}}}
    return patches


class Annotator:
    def __init__(self, policy: LoadPolicy, source: MetricSource, nodes: Nodes,
                 patch: Callable[[str, dict], object], clock: Callable[[], float] = time.time,
                 hot_value: HotValue | None = None):
        self.policy, self.source, self.nodes, self.patch, self.clock = policy, source, nodes, patch, clock
        self.hot_value = hot_value
        self._next: dict[str, float] = dict.fromkeys(policy.sync, 0.0)  # metric -> when it is due
        self._measured: set[str] = set()  # nodes that have had a series of some load metric

    def sync(self) -> int:
        """Query the metrics that are due and annotate the nodes; returns the patches sent."""
        now = self.clock()
        due = {m for m, at in self._next.items() if at <= now}
        if not due:
            return 0
        try:
            fetched = self.source.fetch(due)
        except Exception as error:  # noqa: BLE001 - Prometheus down: old annotations age out by themselves
            log.warning("load annotator: querying %s failed: %s", ", ".join(sorted(due)), error)
            for metric in due:
                self._next[metric] = now + min(self.policy.sync[metric], RETRY)
            return 0
        nodes = self.nodes()
        self._measured &= nodes.keys()  # a deleted node is not waited for
        self._measured.update(n for by_node in fetched.values() for n in by_node)
        for metric in due:
            period = self.policy.sync[metric]
            have = fetched.get(metric) or {}
            lacking = self._measured - have.keys()
            if have and lacking:
                log.debug("load annotator: %s has no series for %s yet; asking again in %gs",
                          metric, ", ".join(sorted(lacking)), min(period, RETRY))
            self._next[metric] = now + (period if have and not lacking else min(period, RETRY))
        stamp = datetime.datetime.fromtimestamp(now, datetime.UTC)
        managed = ",".join([*sorted(self.policy.sync), *([HOT_VALUE_KEY] if self.hot_value else [])])
        sent = 0
        for node in nodes:
            # crane writes 0 for a negative or NaN value, which makes a broken node look idle;
            # here such a value is not written and the old one ages out.
            values = {m: format_value(by_node[node].value / 100.0, stamp)
                      for m, by_node in fetched.items()
                      if node in by_node and math.isfinite(by_node[node].value) and by_node[node].value >= 0}
            if not values:
                continue
            if self.hot_value is not None:
                values[HOT_VALUE_KEY] = format_hot_value(self.hot_value(node), stamp)
            body = {"metadata": {"annotations": {**values, MANAGED_KEY: managed}}}
            try:
                self.patch(node, body)
                sent += 1
            except Exception as error:  # noqa: BLE001 - one node failing must not stop the others
                log.warning("load annotator: annotating %s failed: %s", node, error)
        return sent
