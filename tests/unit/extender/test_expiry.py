"""Warnings ahead of certificate expiry: the Warning Event CertificateExpiring (once per
certificate, by the leader only, on the pod or else the Lease) and the metric of the client
certificates the open connections presented. The Kubernetes client is faked at its one call."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiException

from tas_extender.cli import parser
from tas_extender.cli.serve import ServeSettings
from tas_extender.certs.expiry import REASON, ExpiryEvents, Watched, lease_target, pod_target
from tas_extender.decide.telemetry import Telemetry
from tas_extender.certs.tls import PeerCertificates, Presented

NOW = 1_800_000_000.0
DAY = 86400.0
WARNING = 14 * DAY
LEASE = lease_target("telemetry-aware-scheduling", "tas-extender", "lease-uid")

SERVING = Watched("serving", Presented("CN=tas-extender", 0x1A, NOW + 10 * DAY))
CA = Watched("CA", Presented("CN=tas-extender-ca", 0x2B, NOW + 3000 * DAY))
CLIENT = Watched("client", Presented("CN=kube-scheduler", 0x3C, NOW + 13 * DAY))


class FakeEvents:
    """CoreV1Api.create_namespaced_event, refusing a name already taken as the API server does."""

    def __init__(self):
        self.created: list[tuple[str, dict]] = []
        self.fail_next = 0

    def create_namespaced_event(self, namespace: str, body: dict) -> dict:
        if self.fail_next:
            self.fail_next -= 1
            raise ApiException(status=503, reason="Service Unavailable")
        if any(b["metadata"]["name"] == body["metadata"]["name"] and n == namespace for n, b in self.created):
            raise ApiException(status=409, reason="AlreadyExists")
        self.created.append((namespace, body))
        return body


def events(api: FakeEvents, target=LEASE, leading=True) -> ExpiryEvents:
    return ExpiryEvents(api, lambda: target, WARNING, is_leader=lambda: leading, clock=lambda: NOW)


def test_each_certificate_within_the_warning_gets_one_warning_event():
    api = FakeEvents()
    assert events(api).check([SERVING, CA, CLIENT]) == 2
    bodies = [body for _, body in api.created]
    assert [(b["type"], b["reason"]) for b in bodies] == [("Warning", REASON)] * 2
    assert "the serving certificate CN=tas-extender (serial 1a) expires in 10.0 days" in bodies[0]["message"]
    assert "the client certificate CN=kube-scheduler (serial 3c) expires in 13.0 days" in bodies[1]["message"]


def test_a_certificate_is_warned_about_once_however_often_it_is_checked():
    api = FakeEvents()
    expiry = events(api)
    for _ in range(3):
        expiry.check([SERVING, CLIENT])
    assert len(api.created) == 2


def test_a_renewed_certificate_of_the_same_subject_is_a_new_certificate():
    api = FakeEvents()
    expiry = events(api)
    expiry.check([SERVING])
    renewed_but_short = Watched("serving", Presented(SERVING.certificate.subject, 0x99, NOW + 5 * DAY))
    assert expiry.check([SERVING, renewed_but_short]) == 1


def test_a_leader_that_follows_another_makes_no_second_event_for_the_same_certificate():
    api = FakeEvents()
    events(api).check([SERVING])
    assert events(api).check([SERVING]) == 0  # a new process, nothing remembered: the name is taken
    assert len(api.created) == 1


def test_only_the_leader_records_events():
    api = FakeEvents()
    assert events(api, leading=False).check([SERVING, CLIENT]) == 0
    assert api.created == []


def test_an_event_the_api_server_refused_is_tried_again_next_round():
    api = FakeEvents()
    api.fail_next = 1
    expiry = events(api)
    assert expiry.check([SERVING]) == 0
    assert expiry.check([SERVING]) == 1


@pytest.mark.parametrize(("case", "environ", "expected"), [
    ("in a pod: on the pod, by the downward API's name and uid",
     {"POD_NAME": "tas-extender-7d9-abcde", "POD_NAMESPACE": "telemetry-aware-scheduling", "POD_UID": "u-1"},
     {"apiVersion": "v1", "kind": "Pod", "namespace": "telemetry-aware-scheduling",
      "name": "tas-extender-7d9-abcde", "uid": "u-1"}),
    ("host mode, no POD_NAME: on the Lease", {"POD_NAMESPACE": "telemetry-aware-scheduling"},
     {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "namespace": "telemetry-aware-scheduling",
      "name": "tas-extender", "uid": "lease-uid"}),
])
def test_the_event_goes_on_the_pod_or_else_the_lease(case, environ, expected, tmp_path):
    api = FakeEvents()
    target = pod_target(environ, str(tmp_path / "absent")) or LEASE
    events(api, target).check([SERVING])
    namespace, body = api.created[0]
    assert body["involvedObject"] == expected, case
    assert namespace == expected["namespace"] == body["metadata"]["namespace"]


def test_the_pods_namespace_comes_from_the_service_account_file_without_the_env(tmp_path):
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("tas-system\n")
    target = pod_target({"POD_NAME": "tas-extender-0"}, str(namespace_file))
    assert target is not None and (target.kind, target.namespace, target.name) == ("Pod", "tas-system", "tas-extender-0")


def test_certificate_warning_flag_defaults_to_14_days():
    assert ServeSettings.from_args(parser().parse_args(["serve"])).certificate_warning == 14 * DAY
    assert ServeSettings.from_args(parser().parse_args(["serve", "--certificate-warning", "48h"])) \
        .certificate_warning == 2 * DAY


# --- what the clients present -------------------------------------------------------------

def _pem_der(subject: str, not_after: float) -> bytes:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    end = datetime.datetime.fromtimestamp(not_after, datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(end - datetime.timedelta(days=365))
                   .not_valid_after(end).sign(key, hashes.SHA256()))
    return certificate.public_bytes(serialization.Encoding.DER)


def _client_series(telemetry: Telemetry) -> dict[str, float]:
    return {s.labels["subject"]: s.value for metric in telemetry.client_certificate_expiry.collect()
            for s in metric.samples}


def test_the_client_metric_is_the_earliest_per_subject_among_open_connections():
    telemetry = Telemetry()
    peers = PeerCertificates(telemetry.client_certificates)
    first, second, prometheus = object(), object(), object()
    peers.opened(first, _pem_der("kube-scheduler", NOW + 30 * DAY))
    peers.opened(second, _pem_der("kube-scheduler", NOW + 10 * DAY))
    peers.opened(prometheus, _pem_der("tas-prometheus", NOW + 200 * DAY))
    assert _client_series(telemetry) == {"CN=kube-scheduler": NOW + 10 * DAY, "CN=tas-prometheus": NOW + 200 * DAY}
    peers.closed(second)
    assert _client_series(telemetry)["CN=kube-scheduler"] == NOW + 30 * DAY
    peers.closed(prometheus)
    assert set(_client_series(telemetry)) == {"CN=kube-scheduler"}
    assert [p.subject for p in peers.current()] == ["CN=kube-scheduler"]


def test_a_connection_closed_twice_or_never_seen_changes_nothing():
    telemetry = Telemetry()
    peers = PeerCertificates(telemetry.client_certificates)
    connection = object()
    peers.opened(connection, _pem_der("kube-scheduler", NOW))
    peers.closed(connection)
    peers.closed(connection)
    peers.closed(object())
    assert _client_series(telemetry) == {}
