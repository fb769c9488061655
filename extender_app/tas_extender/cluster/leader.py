"""Leader election with a coordination.k8s.io/v1 Lease: only the leader writes labels and status.

As client-go's leaderelection: another holder's Lease expires when its duration has passed on
this process's own monotonic clock since the Lease was last seen to change, never by comparing
its renewTime with this host's wall clock, which may be skewed from the holder's.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable

from kubernetes import client

log = logging.getLogger(__name__)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaseElector:
    def __init__(self, api: client.CoordinationV1Api, namespace: str, name: str, identity: str,
                 lease_seconds: int = 15, renew_seconds: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.api = api
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds, self.renew_seconds = lease_seconds, renew_seconds
        self.clock = clock
        self.is_leader = False
        self.uid = ""  # the Lease's, once seen: Events about the extender in host mode go on it
        # The Lease as last seen (holder, renewTime, resourceVersion) and when, by `clock`.
        self._observed: tuple[object, ...] | None = None
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _spec(self, acquired: datetime.datetime | None, transitions: int) -> client.V1LeaseSpec:
        now = _now()
        return client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=self.lease_seconds,
                                  acquire_time=acquired or now, renew_time=now,
                                  lease_transitions=transitions)

    def _observe(self, lease: client.V1Lease) -> None:
        """Note the time if the Lease changed since last seen: its expiry counts from then."""
        spec = lease.spec or client.V1LeaseSpec()
        version = lease.metadata.resource_version if lease.metadata else None
        self.uid = (lease.metadata.uid if lease.metadata else None) or self.uid
        record = (spec.holder_identity, spec.renew_time, version)
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()

    def try_acquire(self) -> bool:
        """One round: create, renew or take over the Lease; returns whether we lead."""
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except client.ApiException as error:
            if error.status != 404:
                raise
            body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                                  spec=self._spec(None, 0))
            try:
                self._observe(self.api.create_namespaced_lease(self.namespace, body))
                return True
            except client.ApiException as create_error:
                if create_error.status == 409:
                    return False
                raise
        self._observe(lease)
        spec = lease.spec or client.V1LeaseSpec()  # a Lease without a spec is held by no one
        holder = spec.holder_identity
        duration = spec.lease_duration_seconds or self.lease_seconds
        expired = self.clock() - self._observed_at > duration
        if holder and holder != self.identity and not expired:
            return False
        transitions = (spec.lease_transitions or 0) + (0 if holder == self.identity else 1)
        acquired = spec.acquire_time if holder == self.identity else None
        lease.spec = self._spec(acquired, transitions)
        try:  # replace carries resourceVersion: a concurrent writer makes this fail with 409
            self._observe(self.api.replace_namespaced_lease(self.name, self.namespace, lease))
        except client.ApiException as error:
            if error.status == 409:
                return False
            raise
        return True

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                leading = self.try_acquire()
            except Exception as error:  # noqa: BLE001 - an unreachable API server means not leading
                log.warning("leader election: %s", error)
                leading = False
            if leading != self.is_leader:
                log.info("%s leadership of lease %s/%s", "acquired" if leading else "lost",
                         self.namespace, self.name)
            self.is_leader = leading
            self._stop.wait(self.renew_seconds)

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name="leader-election", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        self._stop.set()

    def release(self) -> None:
        """Give the Lease up on shutdown, so another replica need not wait for it to expire."""
        self.stop()
        if self._thread is not None:  # a renewal in flight must not take the Lease back
            self._thread.join(timeout=10)
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            lease.spec.renew_time = _now()
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)
            log.info("released lease %s/%s", self.namespace, self.name)
        except Exception as error:  # noqa: BLE001 - shutting down: the Lease expires anyway
            log.warning("releasing lease %s/%s: %s", self.namespace, self.name, error)
