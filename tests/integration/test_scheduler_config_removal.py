"""Removing the scheduler configuration puts kubeadm's manifest back byte for byte.

The scheduler_config role in kubeadm mode edits the kube-scheduler static pod manifest; with
`tas_state: absent` it must leave the control plane as kubeadm wrote it, since `kubeadm
upgrade` and the platform team's own checks compare against that. The role runs here on
files of this machine (a manifest as kubeadm 1.36 writes it, placeholder TLS files) with a
small HTTP server answering the scheduler's /healthz, so no cluster is needed; the real-node
scenario runs the same removal on a kubeadm control plane.
"""

from __future__ import annotations

import http.server
import os
import pathlib
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
import yaml

from support import REPO

BIN = pathlib.Path(sys.executable).parent

# kube-scheduler's manifest as kubeadm v1.36 writes it (its formatting, not YAML's).
KUBEADM_MANIFEST = """\
apiVersion: v1
kind: Pod
metadata:
  labels:
    component: kube-scheduler
    tier: control-plane
  name: kube-scheduler
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-scheduler
    - --authentication-kubeconfig=/etc/kubernetes/scheduler.conf
    - --authorization-kubeconfig=/etc/kubernetes/scheduler.conf
    - --bind-address=127.0.0.1
    - --kubeconfig=/etc/kubernetes/scheduler.conf
    - --leader-elect=true
    image: registry.k8s.io/kube-scheduler:v1.36.3
    imagePullPolicy: IfNotPresent
    name: kube-scheduler
    resources:
      requests:
        cpu: 100m
    volumeMounts:
    - mountPath: /etc/kubernetes/scheduler.conf
      name: kubeconfig
      readOnly: true
  hostNetwork: true
  priority: 2000001000
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile:
      type: RuntimeDefault
  volumes:
  - hostPath:
      path: /etc/kubernetes/scheduler.conf
      type: FileOrCreate
    name: kubeconfig
status: {}
"""


class Healthz(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the handler's API
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def healthz_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/healthz"
    server.shutdown()


@pytest.fixture
def control_plane(tmp_path) -> pathlib.Path:
    """An /etc/kubernetes of a kubeadm control plane, and the certificates role's files: the
    scheduler's pair and a copy of the CA in pki/kube-scheduler, the CA's and extender's keys above."""
    (tmp_path / "manifests").mkdir()
    manifest = tmp_path / "manifests" / "kube-scheduler.yaml"
    manifest.write_text(KUBEADM_MANIFEST)
    manifest.chmod(0o600)
    (tmp_path / "pki" / "kube-scheduler").mkdir(parents=True)
    for name in ("ca.crt", "ca.key", "extender.crt", "extender.key", "kube-scheduler/scheduler-client.crt",
                 "kube-scheduler/scheduler-client.key", "kube-scheduler/ca.crt"):
        (tmp_path / "pki" / name).write_text(f"placeholder {name}\n")
    return tmp_path


def scheduler_tls(etc: pathlib.Path) -> pathlib.Path:
    return etc / "pki" / "kube-scheduler"


def run_role(etc: pathlib.Path, healthz_url: str, state: str, succeed: bool = True,
             **overrides: str) -> subprocess.CompletedProcess:
    variables = {
        "tas_state": state,
        "scheduler_config_mode": "kubeadm",
        "scheduler_config_kubernetes_version": "v1.36.3",
        "scheduler_config_path": str(etc / "scheduler-config.yaml"),
        "scheduler_config_kubeadm_manifest": str(etc / "manifests" / "kube-scheduler.yaml"),
        "scheduler_config_kubeadm_backup_dir": str(etc / "tas-backup"),
        "scheduler_config_client_cert": str(scheduler_tls(etc) / "scheduler-client.crt"),
        "scheduler_config_client_key": str(scheduler_tls(etc) / "scheduler-client.key"),
        "scheduler_config_ca": str(scheduler_tls(etc) / "ca.crt"),
        "scheduler_config_healthz_url": healthz_url,
        **overrides,
    }
    play = etc / "play.yml"
    play.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "roles": [{"role": "intel.tas.scheduler_config", "vars": variables}],
    }]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    run = subprocess.run([BIN / "ansible-playbook", "-i", "localhost,", play], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    if succeed:
        assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    return run


def changed(run: subprocess.CompletedProcess) -> int:
    recap = run.stdout[run.stdout.rindex("PLAY RECAP"):]
    return int(recap.split("changed=")[1].split()[0])


def left_over(etc: pathlib.Path) -> list[str]:
    """Files of ours under the fake /etc/kubernetes (the configuration, its versions, the copy)."""
    return sorted(str(p.relative_to(etc)) for p in etc.rglob("*")
                  if p.is_file() and (p.name.startswith("scheduler-config") or "tas-backup" in p.parts))


def tas_mounts(pod: dict) -> dict[str, tuple[str, str]]:
    """Volume name -> (host path, type) of the volumes the role added to the scheduler's pod."""
    return {v["name"]: (v["hostPath"]["path"], v["hostPath"]["type"]) for v in pod["spec"]["volumes"]
            if v["name"].startswith("tas-")}


def expected_mounts(etc: pathlib.Path) -> dict[str, tuple[str, str]]:
    """The configuration, and the directory of the three files the scheduler reads (a renewed
    file renamed over the old one shows in a mounted directory, never in a single-file mount);
    never the certificates directory above it, which holds the CA's and the extender's keys."""
    return {"tas-config": (str(etc / "scheduler-config.yaml"), "File"),
            "tas-scheduler-tls": (str(scheduler_tls(etc)), "Directory")}


def mounted_names(pod: dict) -> set[str]:
    return {m["name"] for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"].startswith("tas-")}


def test_an_install_of_an_earlier_release_stops_mounting_the_certificates_directory(control_plane, healthz_url):
    """0.2.0 mounted the whole certificates directory (tas-pki) into the scheduler's pod."""
    manifest = control_plane / "manifests" / "kube-scheduler.yaml"
    pod = yaml.safe_load(KUBEADM_MANIFEST)
    pod["spec"]["containers"][0]["volumeMounts"] += [
        {"name": "tas-config", "mountPath": str(control_plane / "scheduler-config.yaml"), "readOnly": True},
        {"name": "tas-pki", "mountPath": str(control_plane / "pki"), "readOnly": True}]
    pod["spec"]["volumes"] += [
        {"name": "tas-config", "hostPath": {"path": str(control_plane / "scheduler-config.yaml"), "type": "File"}},
        {"name": "tas-pki", "hostPath": {"path": str(control_plane / "pki"), "type": "Directory"}}]
    manifest.write_text(yaml.safe_dump(pod))
    (control_plane / "scheduler-config.yaml").write_text("{}\n")

    run_role(control_plane, healthz_url, "present")
    upgraded = yaml.safe_load(manifest.read_text())
    assert tas_mounts(upgraded) == expected_mounts(control_plane)
    assert mounted_names(upgraded) == set(expected_mounts(control_plane))


def test_an_install_of_0_3_moves_from_single_file_mounts_to_the_schedulers_directory(control_plane, healthz_url):
    """0.3 mounted each TLS file alone, from the certificates directory itself; those files stay
    where they are (a scheduler restarted before the kubelet runs the new manifest reads them)."""
    manifest = control_plane / "manifests" / "kube-scheduler.yaml"
    pki = control_plane / "pki"
    old_files = {"tas-client-cert": pki / "scheduler-client.crt", "tas-client-key": pki / "scheduler-client.key",
                 "tas-ca": pki / "ca.crt"}
    for path in old_files.values():
        path.write_text(f"0.3 {path.name}\n")
    pod = yaml.safe_load(KUBEADM_MANIFEST)
    config = control_plane / "scheduler-config.yaml"
    pod["spec"]["containers"][0]["command"].append(f"--config={config}")
    pod["spec"]["containers"][0]["volumeMounts"] += [
        {"name": "tas-config", "mountPath": str(config), "readOnly": True},
        *({"name": name, "mountPath": str(path), "readOnly": True} for name, path in old_files.items())]
    pod["spec"]["volumes"] += [
        {"name": "tas-config", "hostPath": {"path": str(config), "type": "File"}},
        *({"name": name, "hostPath": {"path": str(path), "type": "File"}} for name, path in old_files.items())]
    manifest.write_text(yaml.safe_dump(pod))
    config.write_text("{}\n")

    run_role(control_plane, healthz_url, "present")
    upgraded = yaml.safe_load(manifest.read_text())
    assert tas_mounts(upgraded) == expected_mounts(control_plane)
    assert mounted_names(upgraded) == set(expected_mounts(control_plane))
    tls = yaml.safe_load(config.read_text())["extenders"][0]["tlsConfig"]
    assert tls == {"certFile": str(scheduler_tls(control_plane) / "scheduler-client.crt"),
                   "keyFile": str(scheduler_tls(control_plane) / "scheduler-client.key"),
                   "caFile": str(scheduler_tls(control_plane) / "ca.crt")}
    assert {name: path.read_text() for name, path in old_files.items()} \
        == {name: f"0.3 {path.name}\n" for name, path in old_files.items()}

    # and removal takes the new mounts out as it took the old ones
    run_role(control_plane, healthz_url, "absent")
    assert tas_mounts(yaml.safe_load(manifest.read_text())) == {}


def test_a_renewed_client_certificate_restarts_nothing_and_a_new_ca_restarts_the_scheduler(control_plane, healthz_url):
    """The scheduler reads its client pair again for each new connection; its CA only when it starts."""
    manifest = control_plane / "manifests" / "kube-scheduler.yaml"
    config = control_plane / "scheduler-config.yaml"
    run_role(control_plane, healthz_url, "present")
    first = (manifest.read_text(), config.read_text())

    (scheduler_tls(control_plane) / "scheduler-client.crt").write_text("renewed\n")
    again = run_role(control_plane, healthz_url, "present")
    assert (manifest.read_text(), config.read_text()) == first
    assert changed(again) == 0, again.stdout[-3000:]

    (scheduler_tls(control_plane) / "ca.crt").write_text("a new CA\n")
    run_role(control_plane, healthz_url, "present")
    annotations = yaml.safe_load(manifest.read_text())["metadata"]["annotations"]
    assert annotations["checksum/scheduler-config"] != yaml.safe_load(first[0])["metadata"]["annotations"][
        "checksum/scheduler-config"]


@pytest.mark.parametrize(("case", "overrides", "expected"), [
    ("the CA from the certificates directory, beside the CA's key",
     {"scheduler_config_ca": "{pki}/ca.crt"}, "must be in one directory"),
    ("the pair in the certificates directory itself, beside the CA's and the extender's keys",
     {"scheduler_config_client_cert": "{pki}/ca.crt", "scheduler_config_client_key": "{pki}/extender.key",
      "scheduler_config_ca": "{pki}/ca.crt"}, "ca.key"),
])
def test_tls_files_that_would_mount_another_key_are_refused(control_plane, healthz_url, case, overrides, expected):
    manifest = control_plane / "manifests" / "kube-scheduler.yaml"
    run = run_role(control_plane, healthz_url, "present", succeed=False,
                   **{k: v.format(pki=control_plane / "pki") for k, v in overrides.items()})
    assert run.returncode != 0, case
    assert "mounts the directory of its TLS files" in run.stdout and expected in run.stdout, run.stdout[-3000:]
    assert manifest.read_text() == KUBEADM_MANIFEST  # refused before anything was written


def test_another_key_in_the_schedulers_directory_is_refused(control_plane, healthz_url):
    (scheduler_tls(control_plane) / "stray.key").write_text("placeholder\n")
    run = run_role(control_plane, healthz_url, "present", succeed=False)
    assert run.returncode != 0
    assert "stray.key" in run.stdout, run.stdout[-3000:]


def test_install_keeps_kubeadm_manifest_and_removal_puts_it_back(control_plane, healthz_url):
    manifest = control_plane / "manifests" / "kube-scheduler.yaml"
    run_role(control_plane, healthz_url, "present")
    pod = yaml.safe_load(manifest.read_text())
    assert f"--config={control_plane / 'scheduler-config.yaml'}" in pod["spec"]["containers"][0]["command"]
    assert (control_plane / "tas-backup" / "kube-scheduler.yaml").read_text() == KUBEADM_MANIFEST
    assert tas_mounts(pod) == expected_mounts(control_plane)

    # A second install (a changed setting rewrites the configuration) keeps the first copy.
    run_role(control_plane, healthz_url, "present")
    assert (control_plane / "tas-backup" / "kube-scheduler.yaml").read_text() == KUBEADM_MANIFEST

    removal = run_role(control_plane, healthz_url, "absent")
    assert changed(removal) > 0
    assert manifest.read_text() == KUBEADM_MANIFEST
    assert oct(manifest.stat().st_mode & 0o777) == "0o600"
    assert left_over(control_plane) == []
    assert not (control_plane / "tas-backup").exists()

    again = run_role(control_plane, healthz_url, "absent")
    assert changed(again) == 0, again.stdout[-3000:]


def test_removal_without_a_copy_takes_out_what_an_earlier_release_added(control_plane, healthz_url):
    """Installed by a release that kept no copy: the flag, mounts, annotation and DNS policy go."""
    manifest = control_plane / "manifests" / "kube-scheduler.yaml"
    run_role(control_plane, healthz_url, "present")
    shutil.rmtree(control_plane / "tas-backup")

    run_role(control_plane, healthz_url, "absent")
    assert yaml.safe_load(manifest.read_text()) == yaml.safe_load(KUBEADM_MANIFEST)
    assert left_over(control_plane) == []


def test_removal_keeps_a_configuration_the_scheduler_had_before(control_plane, healthz_url):
    """A kubeadm scheduler already started with --config: only the extender entry of ours goes."""
    manifest = control_plane / "manifests" / "kube-scheduler.yaml"
    config = control_plane / "scheduler-config.yaml"
    own = KUBEADM_MANIFEST.replace("    - --leader-elect=true\n",
                                   f"    - --leader-elect=true\n    - --config={config}\n")
    manifest.write_text(own)
    theirs = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": "/etc/kubernetes/scheduler.conf"},
        "extenders": [{"urlPrefix": "http://their-extender:8888/", "filterVerb": "filter", "weight": 1}],
    }
    config.write_text(yaml.safe_dump(theirs))

    run_role(control_plane, healthz_url, "present")
    assert len(yaml.safe_load(config.read_text())["extenders"]) == 2

    run_role(control_plane, healthz_url, "absent")
    assert manifest.read_text() == own
    assert yaml.safe_load(config.read_text()) == theirs


def test_load_aware_mode_adds_the_load_entry_and_turned_off_or_removed_it_goes(control_plane, healthz_url):
    """Load-aware mode: the policy entry (its pods, not ignorable) and the load entry (every pod,
    ignorable) beside theirs; turned off, only the load entry goes; removed, theirs alone is left."""
    manifest = control_plane / "manifests" / "kube-scheduler.yaml"
    config = control_plane / "scheduler-config.yaml"
    manifest.write_text(KUBEADM_MANIFEST.replace("    - --leader-elect=true\n",
                                                 f"    - --leader-elect=true\n    - --config={config}\n"))
    theirs = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": "/etc/kubernetes/scheduler.conf"},
        "extenders": [{"urlPrefix": "http://their-extender:8888/", "filterVerb": "filter", "weight": 1}],
    }
    config.write_text(yaml.safe_dump(theirs))

    def extenders() -> list[tuple[str, str, bool, bool]]:
        return [(e["urlPrefix"], e["filterVerb"], e.get("ignorable", False), bool(e.get("managedResources")))
                for e in yaml.safe_load(config.read_text())["extenders"]]

    ours = "https://tas-extender.telemetry-aware-scheduling.svc.cluster.local:9001/scheduler"
    run_role(control_plane, healthz_url, "present", tas_load_aware="true")
    assert extenders() == [("http://their-extender:8888/", "filter", False, False),
                           (ours, "filter", False, True), (ours, "load-filter", True, False)]
    [load] = [e for e in yaml.safe_load(config.read_text())["extenders"] if e["filterVerb"] == "load-filter"]
    assert load["prioritizeVerb"] == "load-prioritize" and load["managedResources"] == []

    run_role(control_plane, healthz_url, "present")
    assert extenders() == [("http://their-extender:8888/", "filter", False, False), (ours, "filter", False, True)]

    run_role(control_plane, healthz_url, "present", tas_load_aware="true")
    run_role(control_plane, healthz_url, "absent")
    assert yaml.safe_load(config.read_text()) == theirs
