"""The served extender over real HTTPS: mutual TLS is required and TLS 1.2 is the minimum."""

from __future__ import annotations

import pathlib
import ssl

import httpx
import pytest

from bench.latency import client_context

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
JSON = {"Content-Type": "application/json"}


def test_client_with_a_certificate_from_the_ca_is_served(tls_server, certs):
    with httpx.Client(verify=client_context(certs)) as c:
        body = c.post(f"{tls_server}/scheduler/filter", headers=JSON,
                      content=(FIXTURES / "scheduler-requests" / "filter-node-names-k8s1.36.json").read_bytes()).json()
    assert body["NodeNames"] == ["node-1"]


def test_client_without_a_certificate_is_refused(tls_server, certs):
    with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
        with httpx.Client(verify=str(certs / "ca.crt")) as c:
            c.get(f"{tls_server}/healthz")


def test_client_with_a_certificate_from_another_ca_is_refused(tls_server, certs):
    other = certs / "other"
    with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
        with httpx.Client(verify=client_context(other, ca=certs / "ca.crt")) as c:
            c.get(f"{tls_server}/healthz")


def test_tls_1_1_is_refused(tls_server, certs):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(str(certs / "ca.crt"))
    context.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    # Security level 0 lets this client really offer TLS 1.1: the refusal must come from the server.
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    try:
        context.minimum_version = ssl.TLSVersion.TLSv1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    except (ValueError, ssl.SSLError):
        pytest.fail("this Python cannot even offer TLS 1.1")
    with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
        with httpx.Client(verify=context) as c:
            c.get(f"{tls_server}/healthz")


def test_unsafe_serves_plain_http_and_warns(plain_server):
    url, proc = plain_server
    assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
