"""Several control planes share one CA: made once, copied to each, renewed on the same CA.

Each control plane's kube-scheduler presents a client certificate to the extender, which
trusts one CA; a CA per host would leave all but one scheduler unable to reach it (and with
`ignorable: true`, scheduling without TAS, silently). Three inventory hosts on this machine
(local connections, a PKI directory each) stand for three control planes; the Secret is left
out (`certificates_create_secret: false`), and the renewal CronJob
(`certificates_renewal_in_cluster: false`), so no cluster is needed.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from support import REPO

HOSTS = ["cp-1", "cp-2", "cp-3"]
BIN = pathlib.Path(sys.executable).parent


def run_role(tmp_path: pathlib.Path, *extra: str) -> subprocess.CompletedProcess:
    inventory = {"all": {"hosts": {host: {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "certificates_dir": str(tmp_path / host),
    } for host in HOSTS}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "roles": [{"role": "intel.tas.certificates", "vars": {"certificates_create_secret": False,
                                                              "certificates_renewal_in_cluster": False}}],
    }]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([BIN / "ansible-playbook", "-i", tmp_path / "inventory.yml", tmp_path / "play.yml", *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def certificate(tmp_path: pathlib.Path, host: str, name: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate((tmp_path / host / f"{name}.crt").read_bytes())


def signed_by(leaf: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        ca.public_key().verify(leaf.signature, leaf.tbs_certificate_bytes, ec.ECDSA(leaf.signature_hash_algorithm))
    except Exception:  # noqa: BLE001 - any verification failure means "not signed by it"
        return False
    return True


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("pki-ha")
    run = run_role(tmp_path)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return tmp_path


def test_every_control_plane_holds_the_same_ca_and_certificates(installed):
    for name in ("ca", "extender", "kube-scheduler/scheduler-client", "kube-scheduler/ca"):
        first = (installed / HOSTS[0] / f"{name}.crt").read_bytes()
        assert all((installed / host / f"{name}.crt").read_bytes() == first for host in HOSTS), name
    ca = certificate(installed, HOSTS[0], "ca")
    assert all(signed_by(certificate(installed, host, "kube-scheduler/scheduler-client"), ca) for host in HOSTS)


def test_private_keys_stay_readable_by_their_owner_only(installed):
    modes = {f"{host}/{key}": oct((installed / host / key).stat().st_mode & 0o777)
             for host in HOSTS for key in ("ca.key", "extender.key", "kube-scheduler/scheduler-client.key")}
    assert set(modes.values()) == {"0o600"}, modes


def test_a_second_run_changes_nothing(installed):
    run = run_role(installed)
    assert run.returncode == 0, run.stdout[-4000:]
    for host in HOSTS:
        assert re.search(rf"^{host}\s*:.*\bchanged=0\b", run.stdout, flags=re.MULTILINE), run.stdout[-3000:]


def test_renewal_signs_new_certificates_with_the_same_ca_on_every_host(installed):
    ca_before = (installed / HOSTS[0] / "ca.crt").read_bytes()
    serial_before = certificate(installed, HOSTS[0], "kube-scheduler/scheduler-client").serial_number
    run = run_role(installed, "-e", "certificates_force_renewal=true")
    assert run.returncode == 0, run.stdout[-4000:]
    assert all((installed / host / "ca.crt").read_bytes() == ca_before for host in HOSTS)
    renewed = {certificate(installed, host, "kube-scheduler/scheduler-client").serial_number for host in HOSTS}
    assert len(renewed) == 1 and serial_before not in renewed
    ca = certificate(installed, HOSTS[0], "ca")
    assert all(signed_by(certificate(installed, host, "kube-scheduler/scheduler-client"), ca) for host in HOSTS)


def test_what_renew_certificates_renewed_the_role_keeps_and_copies_to_the_other_hosts(installed):
    """The CronJob's renewal (tas-extender renew-certificates --once) on the CA host, then a playbook run:
    the role takes the renewed certificates as its own (same key, subject, extensions, the CA's
    authority key identifier) and changes nothing there, and the other hosts get them."""
    from support import tas_extender_command

    host = installed / HOSTS[0]
    before = {name: certificate(installed, HOSTS[0], name) for name in ("extender", "kube-scheduler/scheduler-client")}
    # a year ahead: every leaf the role made is due
    renewal = subprocess.run([tas_extender_command(), "renew-certificates", "--once", "--certificates-dir", str(host),
                              "--renew-before", "8760h"], capture_output=True, text=True, timeout=60)
    assert renewal.returncode == 0, renewal.stdout + renewal.stderr
    for name, old in before.items():
        new = certificate(installed, HOSTS[0], name)
        assert new.serial_number != old.serial_number and new.public_key() == old.public_key(), name

    run = run_role(installed)
    assert run.returncode == 0, run.stdout[-4000:]
    assert re.search(rf"^{HOSTS[0]}\s*:.*\bchanged=0\b", run.stdout, flags=re.MULTILINE), run.stdout[-3000:]
    for name in before:
        renewed = (host / f"{name}.crt").read_bytes()
        assert all((installed / other / f"{name}.crt").read_bytes() == renewed for other in HOSTS[1:]), name
