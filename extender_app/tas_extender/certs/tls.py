"""Serving certificates that renew without a restart.

kube-scheduler reuses one connection and retries nothing: restarting the extender to pick up a
renewed certificate would fail the calls made meanwhile. OpenSSL uses the context's current
chain for every new handshake, so loading the new files into the same context is enough.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

# Told when the served certificates expire, at start and after each reload: name -> Unix time;
# and when the client certificates of open connections do: subject -> Unix time.
ExpiryReport = Callable[[dict[str, float]], None]


@dataclass(frozen=True)
class Presented:
    """A certificate as the expiry checks see it: whose it is, its serial and when it expires."""

    subject: str
    serial: int
    not_after: float  # Unix time

    @classmethod
    def of(cls, certificate: x509.Certificate) -> Presented:
        return cls(certificate.subject.rfc4514_string(), certificate.serial_number,
                   certificate.not_valid_after_utc.timestamp())


def certificates_in(path: str) -> list[Presented]:
    """Every certificate of a PEM file (a server's chain, or a CA file with an old and a new CA)."""
    with open(path, "rb") as pem:
        return [Presented.of(c) for c in x509.load_pem_x509_certificates(pem.read())]


def expiry(path: str) -> float:
    """When the first certificate of a PEM file to expire does (a CA file may hold an old and a
    new CA during a rotation), as Unix time."""
    with open(path, "rb") as pem:
        certificates = x509.load_pem_x509_certificates(pem.read())
    return min(c.not_valid_after_utc.timestamp() for c in certificates)


class CertificateReloader:
    def __init__(self, context: ssl.SSLContext, cert: str, key: str, cacert: str,
                 report: ExpiryReport | None = None):
        self.context, self.cert, self.key, self.cacert = context, cert, key, cacert
        self.report = report
        self._seen = self._stamps()
        self.reloads = 0
        self._report()

    def _report(self) -> None:
        if self.report is None:
            return
        try:
            self.report({"serving": expiry(self.cert), "ca": expiry(self.cacert)})
        except (OSError, ValueError) as error:
            log.warning("cannot read when the certificates expire: %s", error)

    def _stamps(self) -> tuple[tuple[int, int], ...]:
        stamps = []
        for path in (self.cert, self.key, self.cacert):
            try:
                status = os.stat(path)
                stamps.append((status.st_mtime_ns, status.st_size))
            except OSError:
                stamps.append((0, 0))
        return tuple(stamps)

    def check(self) -> bool:
        """Load the files again if any changed; a half-written pair is retried next time.

        A new CA is added to the trusted ones (both verify until the restart), as a CA rotation needs.
        """
        stamps = self._stamps()
        if stamps == self._seen:
            return False
        try:
            self.context.load_cert_chain(self.cert, self.key)
            self.context.load_verify_locations(self.cacert)
        except (OSError, ssl.SSLError) as error:
            log.warning("certificate files changed but do not load yet: %s", error)
            return False
        self._seen = stamps
        self.reloads += 1
        log.info("reloaded the serving certificate %s and CA %s", self.cert, self.cacert)
        self._report()
        return True

    def start(self, interval: float = 5.0) -> threading.Thread:
        def loop() -> None:
            while True:
                threading.Event().wait(interval)
                self.check()

        thread = threading.Thread(target=loop, name="certificate-reloader", daemon=True)
        thread.start()
        return thread


class PeerCertificates:
    """The client certificates the open connections presented in their TLS handshakes.

    Told by the protocol of each connection when it opens and closes; reports, per subject, when
    the first of them to expire does (a subject no open connection presents is dropped).
    """

    def __init__(self, report: ExpiryReport | None = None):
        self.report = report
        self._open: dict[int, Presented] = {}
        self._lock = threading.Lock()

    def opened(self, connection: object, der: bytes) -> None:
        try:
            presented = Presented.of(x509.load_der_x509_certificate(der))
        except ValueError as error:
            log.warning("cannot read a client's certificate: %s", error)
            return
        with self._lock:
            self._open[id(connection)] = presented
            earliest = self._earliest()
        self._report(earliest)

    def closed(self, connection: object) -> None:
        with self._lock:
            if self._open.pop(id(connection), None) is None:
                return
            earliest = self._earliest()
        self._report(earliest)

    def current(self) -> list[Presented]:
        """Each certificate some open connection presented, once."""
        with self._lock:
            return sorted(set(self._open.values()), key=lambda p: (p.subject, p.serial))

    def _earliest(self) -> dict[str, float]:
        earliest: dict[str, float] = {}
        for presented in self._open.values():
            earliest[presented.subject] = min(presented.not_after, earliest.get(presented.subject, presented.not_after))
        return earliest

    def _report(self, earliest: dict[str, float]) -> None:
        if self.report is not None:
            self.report(earliest)


class _PeerCertificateProtocol(HttpToolsProtocol):
    """Tells `peers` the certificate each TLS connection's client presented. asyncio calls
    connection_made once the handshake is complete, so the certificate is there."""

    peers: PeerCertificates

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if der:
            self.peers.opened(self, der)

    def connection_lost(self, exc: Exception | None) -> None:
        self.peers.closed(self)
        super().connection_lost(exc)


def with_peer_certificates(protocol: type[HttpToolsProtocol], peers: PeerCertificates) -> type[HttpToolsProtocol]:
    """`protocol` (uvicorn.Config(http=...)) that also tells `peers` of each client certificate."""
    return type(protocol.__name__, (_PeerCertificateProtocol, protocol), {"peers": peers})
