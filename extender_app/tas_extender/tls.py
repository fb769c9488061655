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

from cryptography import x509

log = logging.getLogger(__name__)

# Told when the served certificates expire, at start and after each reload: name -> Unix time.
ExpiryReport = Callable[[dict[str, float]], None]


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
