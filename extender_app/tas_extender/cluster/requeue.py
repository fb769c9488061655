"""Waking kube-scheduler when a node passes again: a Node annotation written by the leader.

A pod the extender's filter rejected on every node waits in kube-scheduler's unschedulable pool,
with the pseudo-plugin "Extender" among what rejected it. Only a cluster event moves it back to be
tried (or the scheduler's own flush, after 5 minutes), and a node's metrics changing is no event:
the extender alone sees it. So when a node recovers, the leader patches RECOVERED_ANNOTATION on
it with a new value (the time, RFC 3339 in UTC to the microsecond). The API server's Node update
is an UpdateNodeAnnotation event to the scheduler, to which "Extender" listens for every pod it
rejected; no in-tree plugin listens to annotation changes, so no other pending pod moves.

What rejects a node: a TASPolicy's dontschedule rules (by the policy's key; a policy in audit
mode, deleted or invalid rejects nothing) and, in load-aware mode, the load limits (LOAD). A node
recovers for one of them when it was rejected by it in one sync round and is not in the next:
pods of that policy can go there now, whatever other policies say. The first round of a process
has nothing to compare with and writes nothing.

The annotation is written in the round after the recovery was seen, if the node still passes
then: the scheduler may call any replica (behind the Service), and every replica refreshes its
metrics once per sync period, so by then they all decide as the leader did. Every replica follows
the rounds; only the leader writes, so a new leader knows what the old one saw.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tas_extender.cluster.advertise import api_error

if TYPE_CHECKING:
    from prometheus_client import Counter

    from tas_extender.decide.engine import View
    from tas_extender.decide.load.mode import LoadAware
    from tas_extender.decide.policy import Policy

log = logging.getLogger(__name__)

RECOVERED_ANNOTATION = "telemetry.intel.com/recovered-at"
LOAD = "load"  # what the load-aware mode's limits reject under (a policy's key has a slash)

# One Node event moves every pod "Extender" rejected, so a round where many nodes recover (a
# metric source back after an outage, failing open) need not patch them all: beyond this many the
# rest are left, already woken for.
PER_ROUND = 100
ATTEMPTS = 3  # a failed patch is tried in the next rounds while the node passes, this many times in all

Rejections = Mapping[str, frozenset[str]]  # what rejects (a policy's key, LOAD) -> the nodes it rejects


def policy_rejections(view: View, policies: Iterable[Policy], nodes: Collection[str]) -> dict[str, frozenset[str]]:
    """Policy key -> the nodes among `nodes` that the enforced policy's dontschedule rules filter."""
    return {policy.key: frozenset(node for node in view.failed[policy.key] if node in nodes)
            for policy in policies if not policy.audit and policy.key in view.failed}


def recovered(before: Rejections, now: Rejections, nodes: Collection[str]) -> dict[str, frozenset[str]]:
    """Node -> what rejected it `before` and does not `now`, for the nodes among `nodes`."""
    found: dict[str, set[str]] = {}
    for key, rejected in before.items():
        for node in rejected - now.get(key, frozenset()):
            if node in nodes:
                found.setdefault(node, set()).add(key)
    return {node: frozenset(keys) for node, keys in found.items()}


def passes_any(node: str, keys: Iterable[str], now: Rejections) -> bool:
    """Whether the node passes at least one of `keys` now."""
    return any(node not in now.get(key, frozenset()) for key in keys)


def recovered_patch(at: datetime.datetime) -> dict:
    """The merge patch that sets RECOVERED_ANNOTATION to `at`, and no other key of the node."""
    stamp = at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"metadata": {"annotations": {RECOVERED_ANNOTATION: stamp}}}


def rejections_of(view: Callable[[], View], policies: Callable[[], Iterable[Policy]],
                  load: LoadAware | None = None) -> Callable[[Collection[str]], Rejections]:
    """What rejects which of the nodes, now: the engine's view of the policies, the load limits."""
    def rejections(nodes: Collection[str]) -> Rejections:
        found = policy_rejections(view(), policies(), nodes)
        if load is not None:
            from tas_extender.decide.load.decide import load_failed

            found[LOAD] = frozenset(load_failed(load.state(), sorted(nodes)))
        return found
    return rejections


def _named(keys: Iterable[str]) -> str:
    return ", ".join("the load limits" if key == LOAD else f"policy {key}" for key in sorted(keys))


@dataclass(frozen=True)
class _Due:
    keys: frozenset[str]  # what the node recovered for
    attempts: int = 0  # patches of it that failed


class Requeuer:
    """Each sync round (`sync`), on every replica: what rejects which node; on the leader, the
    annotation patched on the nodes that recovered in the round before and still pass."""

    def __init__(self, rejections: Callable[[Collection[str]], Rejections], patch: Callable[[str, dict], object],
                 patches: Counter, clock: Callable[[], float] = time.time, per_round: int = PER_ROUND):
        self.rejections, self.patch, self.clock, self.per_round = rejections, patch, clock, per_round
        self.sent, self.failed = patches.labels("sent"), patches.labels("failed")
        self._before: Rejections | None = None  # the last round's rejections
        self._due: dict[str, _Due] = {}  # node -> what it recovered for, to be patched this round

    def sync(self, nodes: Collection[str], leader: bool) -> int:
        """Follow one round; as leader, patch the nodes due. Returns the patches sent."""
        now = self.rejections(nodes)
        before, self._before = self._before, now
        due = {node: entry for node, entry in self._due.items() if node in nodes and passes_any(node, entry.keys, now)}
        self._due = {} if before is None else {node: _Due(keys) for node, keys in recovered(before, now, nodes).items()}
        if not leader or not due:
            return 0
        ordered = sorted(due)
        if len(ordered) > self.per_round:
            log.info("%d nodes passing again; %d annotated this round, enough to wake the scheduler",
                     len(ordered), self.per_round)
        stamp = datetime.datetime.fromtimestamp(self.clock(), datetime.UTC)
        sent = 0
        for node in ordered[:self.per_round]:
            entry = due[node]
            body = recovered_patch(stamp)
            try:
                self.patch(node, body)
            except Exception as error:  # noqa: BLE001 - one node failing must not stop the others or the round
                self.failed.inc()
                again = entry.attempts + 1 < ATTEMPTS
                log.warning("%s: annotating %s failed (%s)%s", node, RECOVERED_ANNOTATION, api_error(error),
                            "; trying again next sync round" if again else
                            f"; given up after {ATTEMPTS} attempts (the scheduler's own flush retries its pods)")
                if again:
                    keys = entry.keys | (self._due[node].keys if node in self._due else frozenset())
                    self._due[node] = _Due(keys, entry.attempts + 1)
                continue
            self.sent.inc()
            sent += 1
            log.info("%s passes %s again: annotated %s=%s so that the scheduler tries its waiting pods again",
                     node, _named(entry.keys), RECOVERED_ANNOTATION,
                     body["metadata"]["annotations"][RECOVERED_ANNOTATION])
        return sent
