"""Certificates renewed with no playbook run: a run of the CronJob tas-certificate-renewal signs
the due leaves of every control plane again for the same key, brings the extender's Secret up to
date and exits, and kube-scheduler and the extender take the renewed files without a restart and
without a failed call.

Runs on the real-node cluster after site.yml and the health-metric demo (molecule scenario
realnode). Each certificate is made due (valid 20 more days: within the 30 days of renewal, and
not yet within the 14 of the CertificateExpiring warning) on every control plane and in the
Secret, by the CA in each control plane's own directory; then a Job is made from the CronJob, as
`kubectl create job --from=cronjob/tas-certificate-renewal` makes one, rather than waiting for
the schedule.
"""

from __future__ import annotations

import base64
import datetime
import re

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client

from support import real_control_planes, running_own_schedulers, wait_for
from support.incluster import (EXTENDER_NS, client_tls, cron_job_run_now, node_path,
                               place_a_demo_pod_through_the_extender, ready_pods, wait_until_every_replica_serves)
from tas_extender.certs.renewal import Authority, replace_file, resign

PKI = "/etc/tas/pki"
LEAVES = ["extender.crt", "kube-scheduler/scheduler-client.crt"]
SECRET = "extender-secret"
RENEWAL = "app.kubernetes.io/name=tas-certificate-renewal"
SHORT = datetime.timedelta(days=20)
DEADLINE = 90


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def public_key(certificate: x509.Certificate) -> bytes:
    return certificate.public_key().public_bytes(serialization.Encoding.DER,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)


def make_due(certificate: x509.Certificate, authority: Authority) -> x509.Certificate:
    """The same certificate signed again to end SHORT from now: resign keeps the certificate's
    length of validity, so it starts that length before the new end."""
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    return resign(certificate, authority.certificate, authority.key, _now() + SHORT - lifetime)


def read(node: str, leaf: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(node_path(node, f"{PKI}/{leaf}").read_bytes())


def secret_certificate(core: client.CoreV1Api) -> tuple[x509.Certificate, bytes]:
    data = core.read_namespaced_secret(SECRET, EXTENDER_NS).data
    return x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"])), base64.b64decode(data["tls.key"])


def renewed(certificate: x509.Certificate, key: bytes) -> bool:
    return certificate.not_valid_after_utc > _now() + datetime.timedelta(days=300) and public_key(certificate) == key


def failed_scheduler_calls(core: client.CoreV1Api) -> float:
    """Every extender replica's count of scheduling attempts that failed on the call to its filter."""
    total = 0.0
    for pod in ready_pods(core, EXTENDER_NS, "app.kubernetes.io/name=tas-extender"):
        text = httpx.get(f"https://{pod.status.pod_ip}:9001/metrics", verify=client_tls(), timeout=10).text
        total += sum(float(v) for v in re.findall(r"^tas_extender_scheduler_call_failures_total\{[^}]*\} (\S+)$",
                                                 text, re.M))
    return total


def job_pods(core: client.CoreV1Api, job: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod("kube-system", label_selector=f"batch.kubernetes.io/job-name={job}").items


def test_due_certificates_are_renewed_on_every_control_plane_and_taken_without_a_restart(api_client):
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    schedulers = running_own_schedulers(api_client)
    failures = failed_scheduler_calls(core)
    keys = {}
    for node in real_control_planes():
        authority = Authority.load(node_path(node, PKI))
        for leaf in LEAVES:
            current = read(node, leaf)
            keys[(node, leaf)] = public_key(current)
            replace_file(node_path(node, f"{PKI}/{leaf}"),
                         make_due(current, authority).public_bytes(serialization.Encoding.PEM))
    # the Secret too: the files of the first control plane, as the certificates role stores them
    due = read(real_control_planes()[0], "extender.crt")
    core.patch_namespaced_secret(SECRET, EXTENDER_NS, {"data": {
        "tls.crt": base64.b64encode(due.public_bytes(serialization.Encoding.PEM)).decode()}})
    secret_key = secret_certificate(core)[1]

    job = cron_job_run_now(batch, "tas-certificate-renewal")
    control_planes = real_control_planes()
    wait_for(lambda: (batch.read_namespaced_job_status(job, "kube-system").status.succeeded or 0)
             == len(control_planes), DEADLINE,
             lambda: f"the Job {job} succeeded once on each of {control_planes}: "
                     f"{[(p.spec.node_name, p.status.phase) for p in job_pods(core, job)]}")
    # one pod on each control plane, each of them finished: the renewal holds no process between runs
    pods = job_pods(core, job)
    assert sorted((p.spec.node_name, p.status.phase) for p in pods) \
        == [(node, "Succeeded") for node in sorted(control_planes)]

    wait_for(lambda: all(renewed(read(node, leaf), keys[(node, leaf)])
                         for node in real_control_planes() for leaf in LEAVES), DEADLINE,
             "every control plane's extender and kube-scheduler certificates renewed for the same key")

    def renewed_secret() -> x509.Certificate | None:
        held = secret_certificate(core)[0]
        return held if renewed(held, public_key(due)) else None

    held = wait_for(renewed_secret, DEADLINE, f"the Secret {SECRET} renewed for the same key")
    assert secret_certificate(core)[1] == secret_key

    wait_until_every_replica_serves(core, held.serial_number, DEADLINE)

    # the scheduler reaches the extender with its renewed client pair, never restarted
    place_a_demo_pod_through_the_extender(core, DEADLINE)
    assert running_own_schedulers(api_client) == schedulers
    assert failed_scheduler_calls(core) == failures


def test_the_renewal_runs_on_control_planes_only_as_root_with_no_capability_and_only_its_secrets(api_client):
    """Root, since the files are root's 0600 in a 0700 directory, and not one capability more; one
    pod on each control plane, never two on one, and never two runs at once."""
    cron_job = client.BatchV1Api(api_client).read_namespaced_cron_job("tas-certificate-renewal", "kube-system")
    assert (cron_job.spec.schedule, cron_job.spec.concurrency_policy) == ("17 * * * *", "Forbid")
    job = cron_job.spec.job_template.spec
    assert job.completions == job.parallelism == len(real_control_planes())
    template = job.template
    assert template.spec.node_selector == {"node-role.kubernetes.io/control-plane": ""}
    (apart,) = template.spec.affinity.pod_anti_affinity.required_during_scheduling_ignored_during_execution
    assert (apart.topology_key, apart.label_selector.match_labels) \
        == ("kubernetes.io/hostname", {"app.kubernetes.io/name": "tas-certificate-renewal"})
    assert template.spec.restart_policy == "OnFailure"
    pod, (container,) = template.spec.security_context, template.spec.containers
    assert (pod.run_as_user, pod.seccomp_profile.type) == (0, "RuntimeDefault")
    assert container.security_context.read_only_root_filesystem
    assert container.security_context.allow_privilege_escalation is False
    assert container.security_context.capabilities.drop == ["ALL"] and not container.security_context.capabilities.add
    assert (container.resources.requests["memory"], container.resources.limits["memory"]) == ("192Mi", "384Mi")
    assert [v.host_path.path for v in template.spec.volumes if v.host_path] == [PKI]
    assert "--once" in container.args

    rbac = client.RbacAuthorizationV1Api(api_client)
    (rule,) = rbac.read_cluster_role("tas-certificate-renewal").rules
    assert (rule.api_groups, rule.resources, sorted(rule.verbs)) == ([""], ["secrets"], ["get", "update"])
    assert set(rule.resource_names) == {"extender-secret", "tas-prometheus-client", "tas-prometheus-adapter-tls"}
    binding = rbac.read_cluster_role_binding("tas-certificate-renewal")
    assert [(s.kind, s.namespace, s.name) for s in binding.subjects] \
        == [("ServiceAccount", "kube-system", "tas-certificate-renewal")]
    # nothing else is bound to its service account
    bindings = rbac.list_cluster_role_binding().items + rbac.list_role_binding_for_all_namespaces().items
    others = [b.metadata.name for b in bindings
              if any(s.kind == "ServiceAccount" and s.name == "tas-certificate-renewal" for s in b.subjects or [])]
    assert others == ["tas-certificate-renewal"]
