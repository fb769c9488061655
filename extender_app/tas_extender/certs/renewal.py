"""Leaf certificates renewed where they lie, with no playbook run: `tas-extender renew-certificates`.

Each leaf of the certificates directory (and of its subdirectories, as kube-scheduler's) that is
due is signed again by the CA kept there, for the same key, subject and extensions, and renamed
over the old file, so a reader sees the old file or the new one, never half of it. Then each TLS
Secret made from a leaf is brought up to date once its own certificate is due: replaced with the
resourceVersion read, so of several control planes doing the same one writer wins and the others,
reading again, find it renewed. The CA itself is left to the playbook.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import logging
import os
import pathlib
import stat
import tempfile
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

log = logging.getLogger(__name__)

CA_CERT, CA_KEY = "ca.crt", "ca.key"
CONFLICT_RETRIES = 5  # re-reads of a Secret another writer replaced first

SigningKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey


@dataclass(frozen=True)
class SecretTarget:
    """A kubernetes.io/tls Secret made from the leaf `<stem>.crt`/`<stem>.key` and the CA."""

    namespace: str
    name: str
    stem: str  # relative to the certificates directory: extender, kube-scheduler/scheduler-client

    @classmethod
    def parse(cls, text: str) -> SecretTarget:
        """`NAMESPACE/NAME=STEM`, as the --secret flag takes it."""
        secret, separator, stem = text.partition("=")
        namespace, slash, name = secret.partition("/")
        parts = pathlib.PurePosixPath(stem).parts
        if (not (separator and slash and namespace and name and stem) or "/" in name
                or stem.startswith("/") or ".." in parts):
            raise ValueError(f"{text!r}: expected NAMESPACE/NAME=STEM, STEM a path within the certificates directory "
                             "(e.g. kube-system/my-tls=extender)")
        return cls(namespace, name, stem)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class PassReport:
    """What one pass did: renewed files and Secrets, and what it left alone and why."""

    files: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# --- decisions over certificates (no I/O) --------------------------------------------------

def due(certificate: x509.Certificate, now: datetime.datetime, renew_before: datetime.timedelta) -> bool:
    return certificate.not_valid_after_utc - renew_before <= now


def is_ca(certificate: x509.Certificate) -> bool:
    try:
        return bool(certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def signed_by(certificate: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _authority_key_identifier(ca: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    try:
        ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key())  # type: ignore[arg-type]
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def resign(certificate: x509.Certificate, ca: x509.Certificate, ca_key: SigningKey,
           now: datetime.datetime) -> x509.Certificate:
    """The same certificate signed again: its key, subject and extensions, a new serial, the
    authority key identifier of the CA, and as long a validity from now (never past the CA's)."""
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    builder = (x509.CertificateBuilder()
               .subject_name(certificate.subject).issuer_name(ca.subject)
               .public_key(certificate.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now).not_valid_after(min(now + lifetime, ca.not_valid_after_utc)))
    for extension in certificate.extensions:
        value = extension.value
        if isinstance(value, x509.AuthorityKeyIdentifier):
            value = _authority_key_identifier(ca)
        builder = builder.add_extension(value, extension.critical)
    # Ed25519 and Ed448 sign without a separate hash
    algorithm = None if isinstance(ca_key, (ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)) \
        else certificate.signature_hash_algorithm or hashes.SHA256()
    return builder.sign(ca_key, algorithm)  # type: ignore[arg-type]


def _public_der(key: Any) -> bytes:
    return bytes(key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))


def same_key(certificate: x509.Certificate, private_key_pem: bytes) -> bool:
    """Whether a PEM private key is the one the certificate is for."""
    try:
        key = serialization.load_pem_private_key(private_key_pem, None)
    except (ValueError, TypeError):
        return False
    return _public_der(key.public_key()) == _public_der(certificate.public_key())


SecretAction = Literal["current", "renew", "other-key", "file-not-newer", "unreadable"]


def secret_action(data: dict[str, bytes], certificate: x509.Certificate, now: datetime.datetime,
                  renew_before: datetime.timedelta) -> SecretAction:
    """What to do with a TLS Secret's decoded data, given the leaf file's certificate."""
    try:
        held = x509.load_pem_x509_certificate(data["tls.crt"])
    except (KeyError, ValueError):
        return "unreadable"
    if not due(held, now, renew_before):
        return "current"
    if not same_key(certificate, data.get("tls.key", b"")):
        return "other-key"  # a Secret someone made from another key is theirs to renew
    if certificate.not_valid_after_utc <= held.not_valid_after_utc:
        return "file-not-newer"
    return "renew"


# --- files ---------------------------------------------------------------------------------

def replace_file(path: pathlib.Path, content: bytes) -> None:
    """Write `content` to a new file beside `path` with its mode and owner, then rename it over `path`."""
    status = path.stat()
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            os.fchmod(handle.fileno(), stat.S_IMODE(status.st_mode))
            made = os.fstat(handle.fileno())
            if (made.st_uid, made.st_gid) != (status.st_uid, status.st_gid):
                os.fchown(handle.fileno(), status.st_uid, status.st_gid)
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:  # the rename itself survives a crash
        os.fsync(directory)
    finally:
        os.close(directory)


def leaves(directory: pathlib.Path) -> list[pathlib.Path]:
    """Every `*.crt` with a `*.key` beside it, in the directory and its subdirectories, but the CA's."""
    found = sorted(directory.glob("*.crt")) + sorted(directory.glob("*/*.crt"))
    return [path for path in found if path.with_suffix(".key").is_file() and path != directory / CA_CERT]


@dataclass(frozen=True)
class Authority:
    certificate: x509.Certificate
    key: SigningKey

    @classmethod
    def load(cls, directory: pathlib.Path) -> Authority:
        certificate = x509.load_pem_x509_certificate((directory / CA_CERT).read_bytes())
        key = serialization.load_pem_private_key((directory / CA_KEY).read_bytes(), None)
        if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey,
                                ed448.Ed448PrivateKey)):
            raise ValueError(f"{directory / CA_KEY}: a {type(key).__name__} cannot sign certificates")
        return cls(certificate, key)


def renew_files(directory: pathlib.Path, authority: Authority, now: datetime.datetime,
                renew_before: datetime.timedelta, report: PassReport) -> None:
    """Sign every due leaf of the directory again, in place."""
    for path in leaves(directory):
        try:
            certificate = x509.load_pem_x509_certificate(path.read_bytes())
        except ValueError as error:
            report.warnings.append(f"{path}: not a PEM certificate ({error}); left alone")
            continue
        if is_ca(certificate) or not due(certificate, now, renew_before):
            continue
        if not signed_by(certificate, authority.certificate):
            report.warnings.append(f"{path}: not signed by {directory / CA_CERT}; left alone")
            continue
        if not same_key(certificate, path.with_suffix(".key").read_bytes()):
            report.warnings.append(f"{path}: not for the key {path.with_suffix('.key').name} beside it; left alone")
            continue
        renewed = resign(certificate, authority.certificate, authority.key, now)
        replace_file(path, renewed.public_bytes(serialization.Encoding.PEM))
        report.files.append(str(path))
        log.info("renewed %s: serial %x, valid until %s", path, renewed.serial_number,
                 renewed.not_valid_after_utc.isoformat())


# --- Secrets -------------------------------------------------------------------------------

class SecretsApi(Protocol):
    """The two calls of the Kubernetes client's CoreV1Api that the renewal makes."""

    def read_namespaced_secret(self, name: str, namespace: str) -> Any: ...

    def replace_namespaced_secret(self, name: str, namespace: str, body: Any) -> Any: ...


def _decoded(data: dict[str, str] | None) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in (data or {}).items()}


def _encoded(content: bytes) -> str:
    return base64.b64encode(content).decode()


def renew_secret(api: SecretsApi, target: SecretTarget, directory: pathlib.Path, now: datetime.datetime,
                 renew_before: datetime.timedelta, report: PassReport) -> None:
    """Replace the Secret's certificate and CA with the files' once its certificate is due."""
    from kubernetes.client import ApiException

    cert_path = directory / f"{target.stem}.crt"
    try:
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
        ca = (directory / CA_CERT).read_bytes()
    except (OSError, ValueError) as error:
        report.warnings.append(f"Secret {target}: cannot read {cert_path}: {error}; left alone")
        return
    for _ in range(CONFLICT_RETRIES):
        try:
            secret = api.read_namespaced_secret(target.name, target.namespace)
        except ApiException as error:
            if error.status == 404:  # not made here (its role not run, or in host mode)
                log.debug("Secret %s does not exist; nothing to renew", target)
                return
            raise
        action = secret_action(_decoded(secret.data), certificate, now, renew_before)
        if action == "current":
            return
        if action != "renew":
            why = {"other-key": f"holds another key than {target.stem}.key",
                   "file-not-newer": f"is due but {cert_path} is not newer",
                   "unreadable": "has no readable tls.crt"}[action]
            report.warnings.append(f"Secret {target} {why}; left alone")
            return
        secret.data = {**(secret.data or {}), "tls.crt": _encoded(cert_path.read_bytes()), "ca.crt": _encoded(ca)}
        try:  # the body carries the resourceVersion read: another writer first makes this a 409
            api.replace_namespaced_secret(target.name, target.namespace, secret)
        except ApiException as error:
            if error.status == 409:
                log.info("Secret %s changed since it was read; reading it again", target)
                continue
            raise
        report.secrets.append(str(target))
        log.info("renewed Secret %s from %s", target, cert_path)
        return
    report.warnings.append(f"Secret {target} kept changing under {CONFLICT_RETRIES} attempts; tried again next pass")


def renew_once(directory: pathlib.Path, api: SecretsApi | None, targets: list[SecretTarget],
               renew_before: datetime.timedelta, now: datetime.datetime | None = None) -> PassReport:
    """One pass: the due files of the directory, then the Secrets."""
    now = now or datetime.datetime.now(datetime.UTC)
    report = PassReport()
    renew_files(directory, Authority.load(directory), now, renew_before, report)
    if api is not None:
        for target in targets:
            renew_secret(api, target, directory, now, renew_before, report)
    for warning in report.warnings:
        log.warning("%s", warning)
    return report
