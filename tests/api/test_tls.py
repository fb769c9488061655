"""The served extender over real sockets: mutual TLS is required, TLS 1.2 is the minimum."""

from __future__ import annotations

import pathlib
import re
import socket
import ssl
import subprocess
import time
import warnings
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography import x509
from support import tas_extender_command, wait_for

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"

JSON = {"Content-Type": "application/json"}


def _request(name: str) -> bytes:
    return (FIXTURES / "scheduler-requests" / f"{name}-k8s1.36.json").read_bytes()


def _refused(url: str, context: ssl.SSLContext) -> bool:
    """True when the server ends the TLS session before answering a request."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=parts.hostname) as tls:
                # With TLS 1.3 the server checks the client certificate after the client's
                # handshake finished, so the refusal shows on the first read.
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                return tls.recv(1024) == b""
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            return True


@pytest.mark.parametrize(
    ("verb", "mode"),
    [("filter", "node-names"), ("filter", "full-nodes"), ("prioritize", "node-names"), ("prioritize", "full-nodes")],
)
def test_client_with_a_certificate_from_the_ca_gets_decisions(tls_server, pki, verb, mode):
    with httpx.Client(verify=pki.client_context()) as client:
        response = client.post(f"{tls_server}/scheduler/{verb}", headers=JSON, content=_request(f"{verb}-{mode}"))
    assert response.status_code == 200
    body = response.json()
    if verb == "prioritize":
        assert body == [{"Host": "node-1", "Score": 10}, {"Host": "node-2", "Score": 5},
                        {"Host": "node-3", "Score": 0}]
        return
    passed = body["NodeNames"] if mode == "node-names" else [n["metadata"]["name"] for n in body["Nodes"]["items"]]
    assert passed == ["node-1"]
    assert body["FailedNodes"]["node-2"] == "demo-policy: dontschedule rule health_metric Equals 1 violated (value 1)"


def test_client_without_a_certificate_is_refused_at_the_handshake(tls_server, pki):
    context = ssl.create_default_context(cafile=pki.path("ca.crt"))
    assert _refused(tls_server, context)


def test_client_with_a_certificate_from_another_ca_is_refused(tls_server, pki):
    context = ssl.create_default_context(cafile=pki.path("ca.crt"))
    context.load_cert_chain(pki.path("stranger.crt"), pki.path("stranger.key"))
    assert _refused(tls_server, context)


def _pinned(pki, version: ssl.TLSVersion) -> ssl.SSLContext:
    context = pki.client_context()
    # Security level 0 lets this client really offer old versions: a refusal must come from the server.
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():  # ssl marks TLS 1.1 deprecated, which is the point here
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = context.maximum_version = version
    return context


def test_tls_1_2_is_accepted(tls_server, pki):
    assert not _refused(tls_server, _pinned(pki, ssl.TLSVersion.TLSv1_2))


def test_tls_1_1_is_refused(tls_server, pki):
    try:
        context = _pinned(pki, ssl.TLSVersion.TLSv1_1)
    except (ValueError, ssl.SSLError):
        pytest.fail("this Python cannot offer TLS 1.1")
    assert _refused(tls_server, context)


def test_unsafe_serves_plain_http_and_warns_loudly(plain_server):
    assert httpx.get(f"{plain_server.url}/healthz").json() == {"status": "ok"}
    body = httpx.post(f"{plain_server.url}/scheduler/filter", headers=JSON,
                      content=_request("filter-node-names")).json()
    assert body["NodeNames"] == ["node-1"]
    assert "WARNING" in plain_server.output() and "--unsafe" in plain_server.output()


def test_serve_without_certificates_and_without_unsafe_exits_with_a_message():
    result = subprocess.run(
        [tas_extender_command(), "serve", "--policy-file", str(FIXTURES / "policies" / "demo-policy.yaml"),
         "--metrics-file", str(FIXTURES / "health.prom")], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "--cert, --key and --cacert are required" in result.stderr


def _served_serial(url: str, context: ssl.SSLContext) -> int:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=parts.hostname) as tls:
            der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def test_a_renewed_server_certificate_is_served_without_a_restart(own_tls_server, pki):
    served, renew = own_tls_server
    before = _served_serial(served.url, pki.client_context())
    renewed = renew()
    deadline = time.monotonic() + 15
    while (serial := _served_serial(served.url, pki.client_context())) == before:
        assert time.monotonic() < deadline, "the renewed certificate was not served within 15 s"
        time.sleep(0.5)
    assert serial == renewed.serial_number
    assert served.proc.poll() is None  # the same process: never restarted
    with httpx.Client(verify=pki.client_context()) as client:
        response = client.post(f"{served.url}/scheduler/filter", headers=JSON, content=_request("filter-node-names"))
    assert response.status_code == 200


def test_health_port_answers_probes_without_a_certificate_and_serves_nothing_else(health_port_server, pki):
    served, health = health_port_server
    plain = f"http://127.0.0.1:{health}"
    assert httpx.get(f"{plain}/healthz", timeout=5).json() == {"status": "ok"}
    assert httpx.get(f"{plain}/readyz", timeout=5).json()["status"] == "ready"
    # no decisions, metrics or API description on the unauthenticated port
    assert httpx.post(f"{plain}/scheduler/filter", headers=JSON, content=_request("filter-node-names"),
                      timeout=5).status_code in (404, 405)
    assert httpx.get(f"{plain}/metrics", timeout=5).status_code == 404
    assert httpx.get(f"{plain}/openapi.json", timeout=5).status_code == 404
    # the main port still refuses a client without a certificate
    assert _refused(served.url, ssl.create_default_context(cafile=pki.path("ca.crt")))
    # SIGTERM stops both servers: the health port is free again
    served.proc.terminate()
    served.proc.wait(10)
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", health)) != 0


def _expiry_metric(url: str, context, certificate: str) -> float | None:
    text = httpx.get(f"{url}/metrics", verify=context).text
    found = re.search(rf'^tas_extender_certificate_expiry_timestamp_seconds\{{certificate="{certificate}"\}} (\S+)$',
                      text, re.M)
    return float(found.group(1)) if found else None


def test_metrics_say_when_the_certificates_expire_and_follow_a_renewal(own_tls_server, pki):
    served, renew = own_tls_server
    ca = x509.load_pem_x509_certificate(open(pki.path("ca.crt"), "rb").read())
    server = x509.load_pem_x509_certificate(open(pki.path("server.crt"), "rb").read())
    assert _expiry_metric(served.url, pki.client_context(), "ca") == ca.not_valid_after_utc.timestamp()
    assert _expiry_metric(served.url, pki.client_context(), "serving") == server.not_valid_after_utc.timestamp()
    time.sleep(1.1)  # the renewed certificate's expiry differs by whole seconds
    renewed = renew()
    wait_for(lambda: _expiry_metric(served.url, pki.client_context(), "serving")
             == renewed.not_valid_after_utc.timestamp(), 15, "the metric to follow the renewed certificate")


def _client_expiry_metric(text: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^tas_extender_client_certificate_expiry_timestamp_seconds\{subject="([^"]*)"\} (\S+)$', text, re.M)}


def test_metrics_say_when_each_clients_certificate_expires_while_its_connection_is_open(tls_server, pki):
    client_cert = x509.load_pem_x509_certificate(open(pki.path("client.crt"), "rb").read())
    with httpx.Client(verify=pki.client_context()) as client:
        # the request comes over the connection whose handshake presented the client's certificate
        seen = _client_expiry_metric(client.get(f"{tls_server}/metrics").text)
    assert seen == {"CN=client": client_cert.not_valid_after_utc.timestamp()}
