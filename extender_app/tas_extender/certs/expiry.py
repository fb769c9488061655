"""A Warning Event `CertificateExpiring` ahead of a certificate's expiry.

For the served certificate, the CA and each client certificate an open connection presented, once
per certificate (by serial), by the leader only, on the extender's own pod (the downward API's
POD_NAME), or on its Lease where there is no pod (host mode). The Event's name comes from the
serial, so a replica that leads later finds it made and makes no second one.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tas_extender.certs.tls import Presented

log = logging.getLogger(__name__)

REASON = "CertificateExpiring"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class EventsApi(Protocol):
    """The one call of the Kubernetes client's CoreV1Api that ExpiryEvents makes."""

    def create_namespaced_event(self, namespace: str, body: Any) -> object: ...


@dataclass(frozen=True)
class Watched:
    """A certificate to warn about, and what it is to the extender: serving, CA or client."""

    role: str
    certificate: Presented


@dataclass(frozen=True)
class EventTarget:
    """The object the Events are recorded on."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    def reference(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace,
                "name": self.name, **({"uid": self.uid} if self.uid else {})}


def own_namespace(environ: Mapping[str, str], namespace_file: str = SERVICE_ACCOUNT_NAMESPACE) -> str | None:
    """The pod's namespace: POD_NAMESPACE, else the service account's namespace file."""
    if environ.get("POD_NAMESPACE"):
        return environ["POD_NAMESPACE"]
    try:
        with open(namespace_file, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def pod_target(environ: Mapping[str, str], namespace_file: str = SERVICE_ACCOUNT_NAMESPACE) -> EventTarget | None:
    """The extender's own pod (POD_NAME, POD_UID from the downward API); None outside a pod."""
    name, namespace = environ.get("POD_NAME"), own_namespace(environ, namespace_file)
    if not name or not namespace:
        return None
    return EventTarget("v1", "Pod", namespace, name, environ.get("POD_UID", ""))


def lease_target(namespace: str, name: str, uid: str = "") -> EventTarget:
    return EventTarget("coordination.k8s.io/v1", "Lease", namespace, name, uid)


def expiring(certificates: Iterable[Watched], now: float, warning: float) -> list[Watched]:
    """The certificates that expire within `warning` seconds of `now` (or have expired)."""
    return [w for w in certificates if w.certificate.not_after - warning <= now]


def event_name(watched: Watched) -> str:
    return f"tas-extender-certificate-expiring.{watched.certificate.serial:x}"


def message(watched: Watched, now: float) -> str:
    left = watched.certificate.not_after - now
    when = datetime.datetime.fromtimestamp(watched.certificate.not_after, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    state = f"expires in {left / 86400:.1f} days" if left > 0 else "has expired"
    return (f"the {watched.role} certificate {watched.certificate.subject} (serial "
            f"{watched.certificate.serial:x}) {state}, at {when}")


def event_body(target: EventTarget, watched: Watched, now: float) -> dict[str, Any]:
    stamp = datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": event_name(watched), "namespace": target.namespace},
        "involvedObject": target.reference(),
        "reason": REASON, "type": "Warning", "message": message(watched, now),
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        "source": {"component": "tas-extender"},
    }


class ExpiryEvents:
    """Records one Event per expiring certificate while this replica leads.

    `check` is one round; `start` runs rounds in a thread of its own every `interval` seconds.
    """

    def __init__(self, core: EventsApi, target: Callable[[], EventTarget], warning: float,
                 is_leader: Callable[[], bool], clock: Callable[[], float] = time.time):
        self._core, self._target, self.warning = core, target, warning
        self._is_leader, self._clock = is_leader, clock
        self._reported: set[tuple[str, int]] = set()
        self._stop = threading.Event()

    def check(self, certificates: Iterable[Watched]) -> int:
        """Record the Events not recorded yet; how many this call created."""
        from kubernetes.client import ApiException

        if not self._is_leader():
            return 0
        now, created = self._clock(), 0
        for watched in expiring(certificates, now, self.warning):
            key = (watched.certificate.subject, watched.certificate.serial)
            if key in self._reported:
                continue
            target = self._target()
            try:
                self._core.create_namespaced_event(target.namespace, event_body(target, watched, now))
            except ApiException as error:
                if error.status != 409:  # 409: made already, by this leader or an earlier one
                    log.warning("recording the Event %s on %s %s/%s: %s", REASON, target.kind, target.namespace,
                                target.name, error.reason or error)
                    continue
            else:
                created += 1
                log.warning("%s", message(watched, now))
            self._reported.add(key)
        return created

    def _run(self, certificates: Callable[[], list[Watched]], interval: float) -> None:
        while not self._stop.is_set():
            try:
                self.check(certificates())
            except Exception as error:  # noqa: BLE001 - a failed round is tried again next interval
                log.warning("certificate expiry check: %s", error)
            self._stop.wait(interval)

    def start(self, certificates: Callable[[], list[Watched]], interval: float = 10.0) -> None:
        threading.Thread(target=self._run, args=(certificates, interval), name="certificate-expiry",
                         daemon=True).start()

    def stop(self) -> None:
        self._stop.set()


def watched(cert: str, cacert: str, clients: Iterable[Presented]) -> list[Watched]:
    """The served certificate (the first of its file), every CA of the CA file, and the clients'."""
    from tas_extender.certs.tls import certificates_in

    return ([Watched("serving", certificates_in(cert)[0])] + [Watched("CA", c) for c in certificates_in(cacert)]
            + [Watched("client", c) for c in clients])
