"""A Warning Event CertificateExpiring ahead of expiry, against the local cluster's real API server:
for the served certificate and each client certificate an open connection presented (not the CA,
far from its end), once per certificate, on the leader's pod when POD_NAME names one, else on its
Lease (host mode).

The extender serves mutual TLS here (the Events watch what it serves and what its clients present),
with a PKI the test makes: the CA valid 10 years, the server's certificate 10 days, the client's 5.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import socket
import ssl
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes import client
from support import free_port, tas_extender_command, wait_for
from support.pki import Pki

DEADLINE = 60  # the extender checks every 10 s, and only once it leads
REASON = "CertificateExpiring"


@pytest.fixture
def pki(tmp_path) -> dict[str, x509.Certificate]:
    now = datetime.datetime.now(datetime.UTC)
    authority = Pki(tmp_path, now=now, not_after=now + datetime.timedelta(days=3650))
    server = authority.leaf("server", datetime.timedelta(days=10), ExtendedKeyUsageOID.SERVER_AUTH, ["localhost"])
    client_cert = authority.leaf("client", datetime.timedelta(days=5), ExtendedKeyUsageOID.CLIENT_AUTH, ["localhost"])
    return {"dir": tmp_path, "ca": authority.ca, "server": server, "client": client_cert}


@pytest.fixture
def serve(kubeconfig, crd, namespace, pki) -> Iterator:
    """Start `tas-extender serve` with mutual TLS against the cluster (env: extra environment);
    returns its port. Every process started is stopped afterwards."""
    started: list[subprocess.Popen] = []
    directory = pki["dir"]

    def start(env: dict[str, str]) -> int:
        port = free_port()
        log = (directory / f"serve-{port}.log").open("w")
        environ = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_UID", "POD_NAMESPACE")}
        started.append(subprocess.Popen(
            [tas_extender_command(), "serve", "--host", "127.0.0.1", "--port", str(port),
             "--cert", str(directory / "server.crt"), "--key", str(directory / "server.key"),
             "--cacert", str(directory / "ca.crt"), "--kubeconfig", kubeconfig,
             "--metrics-file", str(pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "health.prom"),
             "--lease-namespace", namespace, "--syncPeriod", "1s"],
            stdout=log, stderr=subprocess.STDOUT, env={**environ, **env}))
        return port

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(10)


def open_client_connection(pki: dict, port: int) -> ssl.SSLSocket:
    """A connection that presented the client's certificate, kept open (as kube-scheduler keeps its own)."""
    context = ssl.create_default_context(cafile=str(pki["dir"] / "ca.crt"))
    context.load_cert_chain(str(pki["dir"] / "client.crt"), str(pki["dir"] / "client.key"))

    def connect() -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        tls = context.wrap_socket(raw, server_hostname="localhost")
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert tls.recv(4096).startswith(b"HTTP/1.1 200")
        return tls

    return wait_for(connect, 30, "a client connection to the extender")


def expiring_events(core: client.CoreV1Api, namespace: str) -> list[client.CoreV1Event]:
    return [e for e in core.list_namespaced_event(namespace).items if e.reason == REASON]


def test_host_mode_warns_on_its_lease_once_per_expiring_certificate(api_client, serve, pki, namespace):
    core = client.CoreV1Api(api_client)
    port = serve({})
    connection = open_client_connection(pki, port)
    try:
        events = wait_for(lambda: len(expiring_events(core, namespace)) >= 2 and expiring_events(core, namespace),
                          DEADLINE, "the CertificateExpiring Events of the server's and the client's certificates")
        lease = client.CoordinationV1Api(api_client).read_namespaced_lease("tas-extender", namespace)
    finally:
        connection.close()
    assert sorted((e.involved_object.kind, e.involved_object.name, e.involved_object.uid) for e in events) \
        == [("Lease", "tas-extender", lease.metadata.uid)] * 2
    assert all(e.type == "Warning" and e.count == 1 for e in events)
    messages = sorted(e.message for e in events)
    assert f"the client certificate CN=client (serial {pki['client'].serial_number:x}) expires in" in messages[0]
    assert f"the serving certificate CN=server (serial {pki['server'].serial_number:x}) expires in" in messages[1]
    assert not any("CN=ca" in m for m in messages)  # ten years off


def test_in_a_pod_the_leader_warns_on_its_own_pod_and_a_second_replica_adds_nothing(api_client, serve, pki,
                                                                                        namespace):
    core, coordination = client.CoreV1Api(api_client), client.CoordinationV1Api(api_client)
    pod = core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"tas-extender-{uuid.uuid4().hex[:6]}"},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}})
    env = {"POD_NAME": pod.metadata.name, "POD_NAMESPACE": namespace, "POD_UID": pod.metadata.uid}
    leader = serve(env)
    wait_for(lambda: coordination.read_namespaced_lease("tas-extender", namespace).spec.holder_identity,
             DEADLINE, "the first replica to lead")
    follower = serve({**env, "POD_NAME": "tas-extender-follower", "POD_UID": ""})
    # both replicas are presented the same client certificate, as by two schedulers' connections
    connections = [open_client_connection(pki, port) for port in (leader, follower)]
    try:
        events = wait_for(lambda: len(expiring_events(core, namespace)) >= 2 and expiring_events(core, namespace),
                          DEADLINE, "the CertificateExpiring Events")
    finally:
        for connection in connections:
            connection.close()
    assert len(events) == 2
    assert {(e.involved_object.kind, e.involved_object.name, e.involved_object.uid) for e in events} \
        == {("Pod", pod.metadata.name, pod.metadata.uid)}
