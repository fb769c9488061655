"""Renewal with no playbook run (`tas-extender renew-certificates`): due leaves signed again by the
directory's CA for the same key, subject and extensions, replaced atomically, and the TLS Secrets
made from them brought up to date under optimistic concurrency. The Kubernetes client is faked
at its two calls."""

from __future__ import annotations

import base64
import copy
import datetime
import os
import pathlib
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes import client
from kubernetes.client import ApiException

from support.pki import Pki, pem_key
from tas_extender.cli import parser
from tas_extender.cli.renew import RenewSettings, renew_until_stopped
from tas_extender.certs.renewal import SecretTarget, renew_once, replace_file

NOW = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
DAY = datetime.timedelta(days=1)
RENEW_BEFORE = 30 * DAY


def role_pki(directory: pathlib.Path) -> Pki:
    """A certificates directory as the certificates role writes it: ca.crt/ca.key (secp384r1) and
    leaves (secp256r1) with the extensions community.crypto's ownca provider gives them, each
    valid for 365 days ending `expires_in` from NOW."""
    return Pki(directory, common_name="tas-extender-ca", curve=ec.SECP384R1(), now=NOW,
               not_before=NOW - 100 * DAY, not_after=NOW + 3000 * DAY, like_the_role=True, leaf_lifetime=365 * DAY)


@pytest.fixture
def pki(tmp_path) -> Pki:
    return role_pki(tmp_path)


def _extensions(certificate: x509.Certificate) -> dict:
    return {e.oid.dotted_string: (e.critical, e.value) for e in certificate.extensions}


# --- files ---------------------------------------------------------------------------------

def test_a_due_leaf_is_signed_again_for_the_same_key_subject_and_extensions(pki):
    old = pki.leaf("extender", 10 * DAY, sans=("tas-extender", "tas-extender.telemetry-aware-scheduling.svc"))
    report = renew_once(pki.directory, None, [], RENEW_BEFORE, NOW)
    new = pki.read("extender")
    assert report.files == [str(pki.directory / "extender.crt")]
    assert new.serial_number != old.serial_number
    assert new.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) \
        == old.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert (new.subject, new.issuer) == (old.subject, old.issuer)
    assert _extensions(new) == _extensions(old)
    new.verify_directly_issued_by(pki.ca)
    assert (new.not_valid_before_utc, new.not_valid_after_utc) == (NOW, NOW + 365 * DAY)


def test_the_authority_key_identifier_is_the_cas_own(pki):
    pki.leaf("extender", DAY)
    renew_once(pki.directory, None, [], RENEW_BEFORE, NOW)
    aki = pki.read("extender").extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == pki.ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest


def test_leaves_not_due_and_the_ca_are_left_as_they_are(pki):
    pki.leaf("extender", 31 * DAY)
    before = {p.name: p.read_bytes() for p in pki.directory.iterdir()}
    report = renew_once(pki.directory, None, [], RENEW_BEFORE, NOW)
    assert report.files == [] and report.warnings == []
    assert {p.name: p.read_bytes() for p in pki.directory.iterdir()} == before


def test_the_schedulers_pair_in_its_own_directory_is_renewed_and_its_ca_copy_kept(pki):
    pki.leaf("kube-scheduler/scheduler-client", 5 * DAY, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    copy_of_ca = pki.directory / "kube-scheduler" / "ca.crt"
    copy_of_ca.write_bytes((pki.directory / "ca.crt").read_bytes())
    report = renew_once(pki.directory, None, [], RENEW_BEFORE, NOW)
    assert report.files == [str(pki.directory / "kube-scheduler" / "scheduler-client.crt")]
    assert copy_of_ca.read_bytes() == (pki.directory / "ca.crt").read_bytes()


def test_the_renewed_file_keeps_its_mode_and_leaves_no_temporary_file(pki):
    pki.leaf("prometheus-client", DAY, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    (pki.directory / "prometheus-client.crt").chmod(0o640)
    renew_once(pki.directory, None, [], RENEW_BEFORE, NOW)
    status = (pki.directory / "prometheus-client.crt").stat()
    assert oct(status.st_mode & 0o777) == "0o640"
    assert (status.st_uid, status.st_gid) == (os.getuid(), os.getgid())
    assert sorted(p.name for p in pki.directory.iterdir()) == ["ca.crt", "ca.key", "prometheus-client.crt",
                                                               "prometheus-client.key"]


def test_a_reader_sees_the_old_file_or_the_new_one_never_half(tmp_path):
    path = tmp_path / "extender.crt"
    old, new = b"o" * 200_000, b"n" * 200_000
    path.write_bytes(old)
    seen: set[bytes] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.add(path.read_bytes())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(20):
            replace_file(path, new)
            replace_file(path, old)
    finally:
        stop.set()
        reader.join()
    assert seen <= {old, new}


def _another_key(pki: Pki) -> None:
    (pki.directory / "extender.key").write_bytes(pem_key(ec.generate_private_key(ec.SECP256R1())))


def _another_ca(pki: Pki) -> None:
    (pki.directory / "other").mkdir()
    stranger = role_pki(pki.directory / "other").leaf("extender", DAY)
    (pki.directory / "extender.crt").write_bytes(stranger.public_bytes(serialization.Encoding.PEM))


@pytest.mark.parametrize(("case", "spoil"), [("a leaf not for the key beside it", _another_key),
                                             ("a leaf signed by another CA", _another_ca)])
def test_a_leaf_the_renewal_cannot_vouch_for_is_left_alone_with_a_warning(pki, case, spoil):
    pki.leaf("extender", DAY)
    spoil(pki)
    before = (pki.directory / "extender.crt").read_bytes()
    report = renew_once(pki.directory, None, [], RENEW_BEFORE, NOW)
    assert (pki.directory / "extender.crt").read_bytes() == before, case
    assert any("extender.crt" in w and "left alone" in w for w in report.warnings), report.warnings


# --- Secrets -------------------------------------------------------------------------------

class FakeSecrets:
    """CoreV1Api's read and replace of Secrets, with the API server's resourceVersion check.
    `meddle` runs once between a read and the replace that follows it (another control plane)."""

    def __init__(self):
        self.secrets: dict[tuple[str, str], client.V1Secret] = {}
        self.replaced: list[tuple[str, str]] = []
        self.meddle = None
        self._version = 0

    def put(self, namespace: str, name: str, data: dict[str, bytes]) -> None:
        self._version += 1
        self.secrets[(namespace, name)] = client.V1Secret(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, resource_version=str(self._version)),
            type="kubernetes.io/tls", data={k: base64.b64encode(v).decode() for k, v in data.items()})

    def data(self, namespace: str, name: str) -> dict[str, bytes]:
        return {k: base64.b64decode(v) for k, v in self.secrets[(namespace, name)].data.items()}

    def read_namespaced_secret(self, name: str, namespace: str) -> client.V1Secret:
        if (namespace, name) not in self.secrets:
            raise ApiException(status=404, reason="Not Found")
        return copy.deepcopy(self.secrets[(namespace, name)])

    def replace_namespaced_secret(self, name: str, namespace: str, body: client.V1Secret) -> client.V1Secret:
        if self.meddle is not None:
            meddle, self.meddle = self.meddle, None
            meddle()
        if body.metadata.resource_version != self.secrets[(namespace, name)].metadata.resource_version:
            raise ApiException(status=409, reason="Conflict")
        self.put(namespace, name, {k: base64.b64decode(v) for k, v in body.data.items()})
        self.replaced.append((namespace, name))
        return self.secrets[(namespace, name)]


TARGET = SecretTarget("telemetry-aware-scheduling", "extender-secret", "extender")


def _secret_data(pki: Pki, stem: str, certificate: x509.Certificate, key=None) -> dict[str, bytes]:
    return {"tls.crt": certificate.public_bytes(serialization.Encoding.PEM),
            "tls.key": pem_key(key or pki.keys[stem]), "ca.crt": (pki.directory / "ca.crt").read_bytes()}


def test_a_due_secret_gets_the_renewed_certificate_and_keeps_its_key(pki):
    old = pki.leaf("extender", 10 * DAY)
    api = FakeSecrets()
    api.put(TARGET.namespace, TARGET.name, _secret_data(pki, "extender", old))
    key_before = api.data(TARGET.namespace, TARGET.name)["tls.key"]
    report = renew_once(pki.directory, api, [TARGET], RENEW_BEFORE, NOW)
    assert report.secrets == [str(TARGET)]
    data = api.data(TARGET.namespace, TARGET.name)
    assert data["tls.crt"] == (pki.directory / "extender.crt").read_bytes()
    assert data["tls.key"] == key_before
    assert data["ca.crt"] == (pki.directory / "ca.crt").read_bytes()


def test_a_secret_not_due_is_not_written(pki):
    pki.leaf("extender", 10 * DAY)
    api = FakeSecrets()
    api.put(TARGET.namespace, TARGET.name, _secret_data(pki, "extender", pki.leaf("extender", 200 * DAY)))
    pki.leaf("extender", 10 * DAY)  # the file is due, the Secret (written by another node) is not
    report = renew_once(pki.directory, api, [TARGET], RENEW_BEFORE, NOW)
    assert report.files and api.replaced == [] and report.warnings == []


def test_a_secret_another_writer_renewed_first_is_read_again_and_left_renewed(pki):
    """Three control planes: the replace of the one that lost carries a stale resourceVersion."""
    old = pki.leaf("extender", 10 * DAY)
    api = FakeSecrets()
    api.put(TARGET.namespace, TARGET.name, _secret_data(pki, "extender", old))
    # the other control plane's renewal of the same key, by the same CA
    winner = pki.leaf("extender", 365 * DAY)
    pki.leaf("extender", 10 * DAY)
    elsewhere = _secret_data(pki, "extender", winner)
    api.meddle = lambda: api.put(TARGET.namespace, TARGET.name, elsewhere)
    report = renew_once(pki.directory, api, [TARGET], RENEW_BEFORE, NOW)
    assert api.replaced == []  # its one replace was refused; read again, the Secret was renewed
    assert report.secrets == [] and report.warnings == []
    assert api.data(TARGET.namespace, TARGET.name)["tls.crt"] == elsewhere["tls.crt"]


def test_a_conflict_with_a_secret_still_due_is_retried_with_the_new_resource_version(pki):
    old = pki.leaf("extender", 10 * DAY)
    api = FakeSecrets()
    api.put(TARGET.namespace, TARGET.name, _secret_data(pki, "extender", old))
    # someone touched the Secret (a label, say) between our read and our replace
    api.meddle = lambda: api.put(TARGET.namespace, TARGET.name, api.data(TARGET.namespace, TARGET.name))
    report = renew_once(pki.directory, api, [TARGET], RENEW_BEFORE, NOW)
    assert report.secrets == [str(TARGET)]
    assert api.data(TARGET.namespace, TARGET.name)["tls.crt"] == (pki.directory / "extender.crt").read_bytes()


def test_a_secret_holding_another_key_is_left_alone_and_reported(pki):
    old = pki.leaf("extender", 10 * DAY)
    api = FakeSecrets()
    theirs = _secret_data(pki, "extender", old, key=ec.generate_private_key(ec.SECP256R1()))
    api.put(TARGET.namespace, TARGET.name, theirs)
    report = renew_once(pki.directory, api, [TARGET], RENEW_BEFORE, NOW)
    assert api.replaced == []
    assert api.data(TARGET.namespace, TARGET.name) == theirs
    assert [w for w in report.warnings if str(TARGET) in w and "another key" in w]


def test_a_secret_that_does_not_exist_is_skipped_quietly(pki):
    pki.leaf("prometheus-adapter", DAY)
    report = renew_once(pki.directory, FakeSecrets(), [SecretTarget("custom-metrics", "tas-prometheus-adapter-tls",
                                                                    "prometheus-adapter")], RENEW_BEFORE, NOW)
    assert report.secrets == [] and report.warnings == []


# --- the command line ----------------------------------------------------------------------

def test_renew_certificates_flags_and_their_defaults():
    settings = RenewSettings.from_args(parser().parse_args(["renew-certificates"]))
    assert (settings.certificates_dir, settings.interval, settings.renew_before, settings.secrets, settings.once) \
        == ("/etc/tas/pki", 3600.0, 30 * 86400.0, [], False)
    settings = RenewSettings.from_args(parser().parse_args([
        "renew-certificates", "--certificates-dir", "/pki", "--interval", "10m", "--renew-before", "720h",
        "--secret", "telemetry-aware-scheduling/extender-secret=extender",
        "--secret", "monitoring/tas-prometheus-client=prometheus-client",
        "--secret", "telemetry-aware-scheduling/tas-scheduler-client=kube-scheduler/scheduler-client", "--once"]))
    assert (settings.certificates_dir, settings.interval, settings.renew_before, settings.once) \
        == ("/pki", 600.0, 30 * 86400.0, True)
    assert settings.secrets == [TARGET, SecretTarget("monitoring", "tas-prometheus-client", "prometheus-client"),
                                SecretTarget("telemetry-aware-scheduling", "tas-scheduler-client",
                                             "kube-scheduler/scheduler-client")]


def test_every_renew_flag_is_a_setting_and_every_setting_a_flag():
    import dataclasses

    flags = set(vars(parser().parse_args(["renew-certificates"]))) - {"command", "run"}
    assert flags == {field.name for field in dataclasses.fields(RenewSettings)}


@pytest.mark.parametrize("flags", [["--secret", "extender-secret=extender"], ["--secret", "ns/name"],
                                   ["--secret", "ns/name="], ["--secret", "ns/a/b=extender"],
                                   ["--secret", "ns/name=/etc/tas/pki/extender"], ["--secret", "ns/name=../extender"],
                                   ["--interval", "0s"], ["--renew-before", "30d"]])
def test_bad_renew_flags_are_refused(flags, capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["renew-certificates", *flags])
    assert flags[0] in capsys.readouterr().err


def test_once_renews_and_exits_zero_even_with_a_warning(pki):
    pki.leaf("extender", DAY)
    (pki.directory / "stray.crt").write_bytes(b"not a certificate")
    (pki.directory / "stray.key").write_bytes(b"")
    settings = RenewSettings(str(pki.directory), 3600.0, 30 * 86400.0, [], None, True, "info")
    assert renew_until_stopped(settings) == 0
    assert pki.read("extender").not_valid_after_utc > NOW + 300 * DAY


def test_once_exits_nonzero_when_the_ca_cannot_be_read(tmp_path):
    settings = RenewSettings(str(tmp_path), 3600.0, 30 * 86400.0, [], None, True, "info")
    assert renew_until_stopped(settings) == 1


def test_a_secret_of_the_schedulers_pair_in_its_own_directory_is_renewed(pki):
    old = pki.leaf("kube-scheduler/scheduler-client", 5 * DAY, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    target = SecretTarget("telemetry-aware-scheduling", "tas-scheduler-client", "kube-scheduler/scheduler-client")
    api = FakeSecrets()
    api.put(target.namespace, target.name, _secret_data(pki, "kube-scheduler/scheduler-client", old))
    report = renew_once(pki.directory, api, [target], RENEW_BEFORE, NOW)
    assert report.secrets == [str(target)]
    assert api.data(target.namespace, target.name)["tls.crt"] \
        == (pki.directory / "kube-scheduler" / "scheduler-client.crt").read_bytes()
