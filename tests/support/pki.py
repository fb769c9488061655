"""The one test PKI: a certificate authority of the tests' own that writes PEM files into a
directory, the CA's <stem>.crt/<stem>.key and the leaves it signs, <stem>.crt/<stem>.key (keys
0600, certificates 0644; a stem may name a subdirectory). Every suite that needs certificates,
and the benchmarks, make them here."""

from __future__ import annotations

import datetime
import pathlib
import ssl
from collections.abc import Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

MINUTE = datetime.timedelta(minutes=1)
DAY = datetime.timedelta(days=1)


def name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: pathlib.Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


class Pki:
    """A CA in `directory`, and the leaves it signs there.

    By default the CA (secp256r1, CN `stem`) and its leaves are valid from a minute before `now`
    for a day. `like_the_role` gives both the extensions the certificates role's ownca provider
    (community.crypto) gives them: key usage, subject and authority key identifiers.
    `leaf_lifetime`: a leaf is valid that long, up to its expiry (otherwise from a minute before now).
    """

    def __init__(self, directory: pathlib.Path, stem: str = "ca", *, common_name: str | None = None,
                 curve: ec.EllipticCurve | None = None, now: datetime.datetime | None = None,
                 not_before: datetime.datetime | None = None, not_after: datetime.datetime | None = None,
                 path_length: int | None = 0, like_the_role: bool = False,
                 leaf_lifetime: datetime.timedelta | None = None,
                 existing: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None) -> None:
        self.directory = directory
        self.now = now or datetime.datetime.now(datetime.UTC)
        self.like_the_role = like_the_role
        self.leaf_lifetime = leaf_lifetime
        self.keys: dict[str, ec.EllipticCurvePrivateKey] = {}  # stem -> the key of its leaf
        if existing is not None:
            self.ca, self.ca_key = existing
            return
        self.ca_key = ec.generate_private_key(curve or ec.SECP256R1())
        subject = name(common_name or stem)
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                   .public_key(self.ca_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(not_before or self.now - MINUTE).not_valid_after(not_after or self.now + DAY)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True))
        if like_the_role:
            builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key()),
                                            critical=False)
        self.ca = builder.sign(self.ca_key, hashes.SHA256())
        _write(directory / f"{stem}.crt", self.ca.public_bytes(serialization.Encoding.PEM), 0o644)
        _write(directory / f"{stem}.key", pem_key(self.ca_key), 0o600)

    @classmethod
    def load(cls, directory: pathlib.Path, stem: str = "ca", **settings) -> Pki:
        """The CA a Pki wrote into `directory` earlier (or a copy of its files), to sign more leaves."""
        ca = x509.load_pem_x509_certificate((directory / f"{stem}.crt").read_bytes())
        key = serialization.load_pem_private_key((directory / f"{stem}.key").read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey), key
        return cls(directory, stem, existing=(ca, key), **settings)

    def leaf(self, stem: str, expires_in: datetime.timedelta = DAY,
             usage: x509.ObjectIdentifier = ExtendedKeyUsageOID.SERVER_AUTH,
             sans: Iterable[str | x509.GeneralName] = (), *, common_name: str | None = None,
             not_before: datetime.datetime | None = None) -> x509.Certificate:
        """Write stem.crt, signed by the CA, valid until `expires_in` from now, for `usage` and the
        subject alternative names `sans` (a string is a DNS name); CN the stem's last part. The
        stem's first leaf gets a new key, written to stem.key; later ones keep it."""
        path = self.directory / f"{stem}.crt"
        fresh = stem not in self.keys
        if fresh:
            self.keys[stem] = ec.generate_private_key(ec.SECP256R1())
        key = self.keys[stem]
        not_after = self.now + expires_in
        if not_before is None:
            not_before = not_after - self.leaf_lifetime if self.leaf_lifetime else self.now - MINUTE
        builder = (x509.CertificateBuilder().subject_name(name(common_name or pathlib.Path(stem).name))
                   .issuer_name(self.ca.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after))
        if self.like_the_role:
            builder = builder.add_extension(
                x509.KeyUsage(True, True, False, False, False, False, False, False, False), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if self.like_the_role:
            builder = (builder
                       .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                       .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()),
                                      critical=False))
        names = [n if isinstance(n, x509.GeneralName) else x509.DNSName(n) for n in sans]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.ca_key, hashes.SHA256())
        _write(path, certificate.public_bytes(serialization.Encoding.PEM), 0o644)
        key_path = path.with_suffix(".key")
        if fresh or not key_path.exists():
            _write(key_path, pem_key(key), 0o600)
        return certificate

    def read(self, stem: str) -> x509.Certificate:
        return x509.load_pem_x509_certificate((self.directory / f"{stem}.crt").read_bytes())

    def path(self, name: str) -> str:
        return str(self.directory / name)

    def client_context(self, client: str = "client", ca: str = "ca.crt") -> ssl.SSLContext:
        """A client TLS context that presents the pair `client` and trusts the CA file `ca`."""
        context = ssl.create_default_context(cafile=self.path(ca))
        context.load_cert_chain(self.path(f"{client}.crt"), self.path(f"{client}.key"))
        return context
