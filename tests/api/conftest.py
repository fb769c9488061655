"""The real `tas-extender serve` process over HTTP(S), and a PKI made for it (support.pki)."""

from __future__ import annotations

import ipaddress
import pathlib
import subprocess
import time
from dataclasses import dataclass

import httpx
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from support import free_port, tas_extender_command
from support.pki import Pki

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
STARTUP_SECONDS = 30


# --- certificates -------------------------------------------------------------------------

@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    """The CA (ca), the server pair it signed (server), a client pair it signed (client), and a
    client of another CA (other-ca, stranger)."""
    directory = tmp_path_factory.mktemp("pki")
    pki = Pki(directory)
    pki.leaf("server", sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    pki.leaf("client", usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    Pki(directory, "other-ca").leaf("stranger", usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    return pki


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
        return Pki.load(tmp_path).leaf("server", sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])

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
