"""The sync loop: fetch the metrics, rebuild the decisions and, on the leader, write them to the cluster."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from tas_extender.decide.cache import MetricCache
from tas_extender.decide.engine import Engine
from tas_extender.decide.store import PolicyStore

if TYPE_CHECKING:  # both import the Kubernetes client, which serving from files does not need
    from tas_extender.cluster.annotator import Annotator
    from tas_extender.cluster.controller import Controller
    from tas_extender.cluster.descheduler_runs import DeschedulerRuns
    from tas_extender.cluster.requeue import Requeuer

log = logging.getLogger(__name__)


class SyncLoop:
    """Every `period` seconds, in a thread of its own, one round of `run_once`."""

    def __init__(self, store: PolicyStore, cache: MetricCache, engine: Engine, period: float,
                 controller: Controller | None = None, annotator: Annotator | None = None,
                 load_aware: bool = False, requeuer: Requeuer | None = None,
                 descheduler_runs: DeschedulerRuns | None = None):
        self.store, self.cache, self.engine, self.period = store, cache, engine, period
        self.controller, self.annotator, self.load_aware = controller, annotator, load_aware
        self.requeuer, self.descheduler_runs = requeuer, descheduler_runs
        self._load_annotations_removed = False
        self._stop = threading.Event()
        self._decided = threading.Event()
        self._thread: threading.Thread | None = None

    def decided(self) -> bool:
        """Whether one round has fetched the metrics of the policies listed before it began:
        until then a policy's metrics are missing and filter would let every node pass."""
        return self._decided.is_set()

    def run_once(self) -> None:
        """Refresh the metric cache and the engine's view; once the nodes are listed, follow which
        nodes pass again (the requeuer) and which violate, and as leader reconcile labels and policy
        status, write (or, with the mode off, remove) load annotations, annotate the nodes that pass
        again and start a descheduler run when a node starts violating (after its label is written)."""
        policies_listed = self.store.synced
        self.cache.refresh(self.store.metric_names())
        self.engine.rebuild()
        if policies_listed:
            self._decided.set()
        controller = self.controller
        if controller is None or not controller.nodes_synced:
            return
        leader = controller.is_leader()
        if leader:
            controller.reconcile()
            if self.annotator is not None:
                self.annotator.sync()
            elif not self.load_aware and not self._load_annotations_removed:  # the mode was turned off
                controller.remove_load_annotations()
                self._load_annotations_removed = True
        # Every replica follows the rounds, so that a new leader knows the last; from the first
        # decided one (before it, filter rejected no pod: it answered an Error).
        if self.requeuer is not None and self.decided():
            self.requeuer.sync(controller.nodes.names(), leader)
        if self.descheduler_runs is not None and self.decided():
            self.descheduler_runs.sync(controller.nodes.names(), leader)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - the loop must survive anything one round throws
                log.exception("sync failed")
            self._stop.wait(max(0.0, self.period - (time.monotonic() - started)))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the round in progress, if any; `join` waits for that."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the loop to end; whether it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()
