"""Certificates renewed by the certificates role (through site.yml) while pods are scheduled."""

from __future__ import annotations

import ssl
import threading
import time

from cryptography import x509
from kubernetes import client

from provisioned import EXTENDER, create_policy, health_rule, run_pods, run_playbook, scale, wait_bound
from support import wait_for

STEPS = 40


def served_certificate(stack) -> x509.Certificate:
    host, port = stack.extender_url.removeprefix("https://").split(":")
    pem = ssl.get_server_certificate((host, int(port)))
    return x509.load_pem_x509_certificate(pem.encode())


def test_renewal_under_load_fails_no_scheduling_call(api_client, namespace, stack, extender, healthy):
    policy = create_policy(api_client, namespace, health_rule("dontschedule"))
    run_pods(api_client, namespace, policy, 1)
    wait_bound(api_client, namespace, 1)
    scheduler_log = stack.log("kube-scheduler")
    log_offset = scheduler_log.stat().st_size
    pid = stack.pid(EXTENDER)
    before = served_certificate(stack).serial_number

    done = threading.Event()

    def keep_scheduling() -> None:  # one more pod every half second until the play is over
        replicas = 1
        while not done.is_set() and replicas < STEPS:
            replicas += 1
            scale(api_client, namespace, "load", replicas)
            time.sleep(0.5)

    feeder = threading.Thread(target=keep_scheduling)
    feeder.start()
    try:
        play = run_playbook("playbooks/site.yml", "-e", "certificates_force_renewal=true")
    finally:
        done.set()
        feeder.join()
    assert play.returncode == 0, play.stdout[-3000:] + play.stderr[-2000:]
    assert "PRIVATE KEY" not in play.stdout + play.stderr, "a private key appeared in Ansible's output"

    replicas = client.AppsV1Api(api_client).read_namespaced_deployment("load", namespace).spec.replicas
    assert replicas > 2, "pods were being created while the play ran"
    wait_bound(api_client, namespace, replicas)

    assert served_certificate(stack).serial_number != before, "the extender serves the renewed certificate"
    assert stack.pid(EXTENDER) == pid, "the extender loaded it without a restart"
    new_lines = scheduler_log.read_text(errors="replace")[log_offset:]
    failures = [line for line in new_lines.splitlines() if "extender" in line.lower() and
                ("error" in line.lower() or "skipping" in line.lower())]
    assert failures == [], "the scheduler saw failed extender calls:\n" + "\n".join(failures[:10])
    wait_for(lambda: extender.get("/readyz").status_code == 200, 30, "the extender is ready")
