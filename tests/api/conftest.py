"""The real `tas-extender serve` process over HTTP(S), and a PKI made for it with `cryptography`."""

from __future__ import annotations

import datetime
import ipaddress
import pathlib
import ssl
import subprocess
import time
from dataclasses import dataclass

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from support import free_port, tas_extender_command

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
STARTUP_SECONDS = 30


# --- certificates -------------------------------------------------------------------------

def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _save(directory: pathlib.Path, stem: str, key: ec.EllipticCurvePrivateKey,
          cert: x509.Certificate) -> None:
    (directory / f"{stem}.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    (directory / f"{stem}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _issue(directory: pathlib.Path, stem: str, issuer: x509.Certificate | None,
           issuer_key: ec.EllipticCurvePrivateKey | None, **kind) -> tuple:
    """Write stem.key/stem.crt: a CA when issuer is None, else a leaf signed by it."""
    now = datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (x509.CertificateBuilder().subject_name(_name(stem)).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=1))
               .not_valid_after(now + datetime.timedelta(days=1)))
    if issuer is None:
        builder = builder.issuer_name(_name(stem)).add_extension(
            x509.BasicConstraints(ca=True, path_length=0), critical=True)
        issuer_key = key
    else:
        builder = builder.issuer_name(issuer.subject).add_extension(
            x509.ExtendedKeyUsage([kind["usage"]]), critical=False)
        if kind.get("sans"):
            builder = builder.add_extension(x509.SubjectAlternativeName(kind["sans"]), critical=False)
    cert = builder.sign(issuer_key, hashes.SHA256())
    _save(directory, stem, key, cert)
    return cert, key


@dataclass(frozen=True)
class Pki:
    """Paths of: the CA, the server pair it signed, a client pair it signed, a client of another CA."""

    directory: pathlib.Path

    def path(self, name: str) -> str:
        return str(self.directory / name)

    def client_context(self, client: str = "client") -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.path("ca.crt"))
        context.load_cert_chain(self.path(f"{client}.crt"), self.path(f"{client}.key"))
        return context


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca, ca_key = _issue(directory, "ca", None, None)
    _issue(directory, "server", ca, ca_key, usage=ExtendedKeyUsageOID.SERVER_AUTH,
           sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    _issue(directory, "client", ca, ca_key, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    other, other_key = _issue(directory, "other-ca", None, None)
    _issue(directory, "stranger", other, other_key, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    return Pki(directory)


# --- the served process -------------------------------------------------------------------

@dataclass
class Served:
    url: str
    proc: subprocess.Popen
    log: pathlib.Path

    def output(self) -> str:
        return self.log.read_text()


def start_serve(tmp_path: pathlib.Path, args: list[str], policy_files: tuple[pathlib.Path, ...] = (),
                metrics_file: pathlib.Path = FIXTURES / "health.prom") -> Served:
    """`tas-extender serve` on a free port of 127.0.0.1 with the demo policy (and `policy_files`)
    and the metrics file."""
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    policies = [arg for path in (FIXTURES / "policies" / "demo-policy.yaml", *policy_files)
                for arg in ("--policy-file", str(path))]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [tas_extender_command(), "serve", "--host", "127.0.0.1", "--port", str(port), *args, *policies,
             "--metrics-file", str(metrics_file), "--syncPeriod", "1s"],
            stdout=out, stderr=subprocess.STDOUT)
    scheme = "http" if "--unsafe" in args else "https"
    return Served(f"{scheme}://127.0.0.1:{port}", proc, log)


def wait_ready(served: Served, **client_args) -> None:
    """Poll /readyz until 200, failing early if the process exits."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if served.proc.poll() is not None:
            pytest.fail(f"tas-extender exited with {served.proc.returncode}: {served.output()}")
        try:
            if httpx.get(served.url + "/readyz", timeout=2, **client_args).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    pytest.fail(f"tas-extender did not become ready in {STARTUP_SECONDS}s: {served.output()}")


def stop(served: Served) -> None:
    served.proc.terminate()
    try:
        served.proc.wait(10)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        served.proc.wait(10)


@pytest.fixture(scope="module")
def tls_server(pki, tmp_path_factory):
    served = start_serve(tmp_path_factory.mktemp("tls"), [
        "--cert", pki.path("server.crt"), "--key", pki.path("server.key"), "--cacert", pki.path("ca.crt")])
    wait_ready(served, verify=pki.client_context())
    yield served.url
    stop(served)


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory):
    served = start_serve(tmp_path_factory.mktemp("plain"), ["--unsafe"])
    wait_ready(served)
    yield served
    stop(served)


@pytest.fixture
def serve(tmp_path):
    """start_serve for a test (its arguments but the directory); every process it started is
    stopped afterwards."""
    started: list[Served] = []

    def start(args: list[str], **kwargs) -> Served:
        started.append(start_serve(tmp_path, args, **kwargs))
        return started[-1]

    yield start
    for served in started:
        stop(served)


@pytest.fixture
def own_tls_server(pki, tmp_path):
    """A server of its own on copies of the PKI, and a function that renews its certificate."""
    import shutil

    for name in ("ca.crt", "ca.key", "server.crt", "server.key"):
        shutil.copy(pki.path(name), tmp_path / name)
    served = start_serve(tmp_path, ["--cert", str(tmp_path / "server.crt"), "--key", str(tmp_path / "server.key"),
                                    "--cacert", str(tmp_path / "ca.crt")])

    def renew() -> x509.Certificate:
        ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
        ca_key = serialization.load_pem_private_key((tmp_path / "ca.key").read_bytes(), None)
        cert, _ = _issue(tmp_path, "server", ca, ca_key, usage=ExtendedKeyUsageOID.SERVER_AUTH,
                         sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        return cert

    try:
        wait_ready(served, verify=pki.client_context())
        yield served, renew
    finally:
        stop(served)


@pytest.fixture
def health_port_server(pki, tmp_path):
    """A TLS server with --health-port: yields (served, health port); stopping twice is harmless."""
    health = free_port()
    served = start_serve(tmp_path, ["--cert", pki.path("server.crt"), "--key", pki.path("server.key"),
                                    "--cacert", pki.path("ca.crt"), "--health-port", str(health)])
    wait_ready(served, verify=pki.client_context())
    yield served, health
    stop(served)


@dataclass
class Guarded:
    """A served extender with short deadlines for slow clients and a low connection cap."""

    served: Served
    health_port: int
    timeout: float  # --header-timeout and --body-timeout
    max_connections: int  # --max-connections, the extender's port


@pytest.fixture(scope="module")
def guarded_server(pki, tmp_path_factory):
    health, timeout, max_connections = free_port(), 2.0, 32
    served = start_serve(tmp_path_factory.mktemp("guarded"), [
        "--cert", pki.path("server.crt"), "--key", pki.path("server.key"), "--cacert", pki.path("ca.crt"),
        "--health-port", str(health), "--header-timeout", f"{timeout}s", "--body-timeout", f"{timeout}s",
        "--max-connections", str(max_connections)])
    wait_ready(served, verify=pki.client_context())
    yield Guarded(served, health, timeout, max_connections)
    stop(served)
