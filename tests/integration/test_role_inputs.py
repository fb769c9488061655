"""A role given a wrong input stops before it does anything, with a message naming the variable.

Each case runs `ansible-playbook` on localhost (connection local, no facts) with one role of
intel.tas and one wrong variable. The argument spec catches wrong types and choices, the role's
preflight.yml catches wrong meanings; both run before any file, service or Kubernetes call, so
no cluster is needed and nothing on the machine changes. In the integration suite, not the unit
one, for the cost of the playbook runs (about 40 s of `make unit` when they were there).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import yaml

from support import DEFAULT_CLUSTER_DIR

REPO = pathlib.Path(__file__).resolve().parents[2]
PLAYBOOK_TIMEOUT = 120
ARGSPEC = "Validating arguments against arg spec 'main'"
REGISTRY_CHECK = "Check the registry the images are pulled from"


@dataclass(frozen=True)
class Case:
    id: str
    role: str
    wrong: dict
    failing_task: str  # the task that stops the play
    says: tuple[str, ...]  # what the output must name
    not_says: tuple[str, ...] = ()  # what it must not
    beside: bool = False  # prometheus.prometheus installed too (its stand-in, tests/fixtures/collections)


MISSING = "/nonexistent/tas-pki"

CASES = [
    Case("extender port is not a number", "extender", {"extender_port": "abc"}, ARGSPEC, ("argument 'extender_port'",)),
    Case("extender replicas is a list", "extender", {"extender_replicas": [1]}, ARGSPEC, ("argument 'extender_replicas'",)),
    Case("extender deploy mode is not a choice", "extender", {"extender_deploy_mode": "daemonset"}, ARGSPEC,
         ("value of extender_deploy_mode must be one of: host, kubernetes, got: daemonset",)),
    Case("extender extra args is a string", "extender", {"extender_extra_args": {"a": 1}}, ARGSPEC,
         ("argument 'extender_extra_args'",)),
    Case("extender port out of range", "extender", {"extender_port": 70000}, "Check the sync period and port",
         ("extender_port a port number (got 70000)",)),
    Case("extender sync period is not a duration", "extender", {"extender_sync_period": "5 seconds"},
         "Check the sync period and port", ("extender_sync_period", "5 seconds")),
    Case("extender in host mode without its certificate", "extender",
         {"extender_deploy_mode": "host", "extender_cert": f"{MISSING}/extender.crt",
          "extender_key": f"{MISSING}/extender.key", "extender_cacert": f"{MISSING}/ca.crt"},
         "Stop when a TLS file is missing", ("extender_cert", f"{MISSING}/extender.crt")),
    Case("certificate renewal not before expiry", "certificates",
         {"certificates_valid_days": 365, "certificates_renew_days": 365}, "Check validity periods and extra names",
         ("certificates_renew_days (365)", "certificates_valid_days (365)")),
    Case("certificate renewal after expiry", "certificates",
         {"certificates_valid_days": 30, "certificates_renew_days": 60}, "Check validity periods and extra names",
         ("certificates_renew_days (60)",)),
    Case("certificates outliving their CA", "certificates", {"certificates_valid_days": 4000},
         "Check validity periods and extra names", ("certificates_ca_valid_days (3650)",)),
    Case("extra SAN without DNS: or IP:", "certificates", {"certificates_extra_sans": ["tas.example.com"]},
         "Check validity periods and extra names", ("certificates_extra_sans", "tas.example.com")),
    Case("certificate days are not a number", "certificates", {"certificates_valid_days": "a year"}, ARGSPEC,
         ("argument 'certificates_valid_days'",)),
    Case("certificate renewal schedule is not cron", "certificates", {"certificates_renewal_schedule": "hourly"},
         "Check validity periods and extra names", ("certificates_renewal_schedule", "hourly")),
    Case("certificates in the cluster's own PKI", "certificates", {"certificates_dir": "/etc/kubernetes/pki"},
         "Check that the cluster's own CA is not used for the extender", ("certificates_dir /etc/kubernetes/pki",)),
    Case("descheduler 0.25 in kubernetes mode", "descheduler",
         {"descheduler_deploy_mode": "kubernetes", "descheduler_version": "v0.25.0"},
         "Refuse descheduler versions that misbehave with telemetry policies",
         ("descheduler 0.25.0 is not supported", "set descheduler_version")),
    Case("descheduler version is not a version", "descheduler", {"descheduler_version": "latest"},
         "Refuse descheduler versions that misbehave with telemetry policies",
         ("descheduler latest is not supported",)),
    Case("descheduler interval is not a duration", "descheduler", {"descheduler_interval": "5 minutes"},
         "Check the interval and schedule", ("descheduler_interval", "5 minutes")),
    Case("descheduler schedule is not cron", "descheduler", {"descheduler_schedule": "hourly"},
         "Check the interval and schedule", ("descheduler_schedule", "hourly")),
    Case("descheduler cap of zero", "descheduler", {"descheduler_max_evictions_per_node": 0},
         "Check the eviction caps and the namespace scope", ("Each eviction cap must be a positive number", "per node 0")),
    Case("descheduler total cap in the v1alpha1 format", "descheduler",
         {"descheduler_version": "v0.23.1", "descheduler_max_evictions_total": 20},
         "Check the eviction caps and the namespace scope", ("needs descheduler 0.31 or later (this is 0.23.1",)),
    Case("descheduler namespaces both included and excluded", "descheduler",
         {"descheduler_namespaces_include": ["a"], "descheduler_namespaces_exclude": ["b"]},
         "Check the eviction caps and the namespace scope",
         ("only one of descheduler_namespaces_include and descheduler_namespaces_exclude",)),
    Case("descheduler rebalancing by load in host mode", "descheduler",
         {"descheduler_deploy_mode": "host", "descheduler_binary": str(DEFAULT_CLUSTER_DIR / "bin" / "descheduler"),
          "descheduler_rebalance_by_load": True},
         "Check rebalancing by load", ("needs descheduler_deploy_mode kubernetes", "this is host")),
    Case("descheduler load marks the wrong way round", "descheduler",
         {"descheduler_deploy_mode": "kubernetes", "descheduler_rebalance_by_load": True,
          "descheduler_load_low": 70, "descheduler_load_high": 65},
         "Check rebalancing by load", ("descheduler_load_low (70) must be below descheduler_load_high (65)",)),
    Case("descheduler cap is not a number", "descheduler", {"descheduler_max_evictions_total": "many"}, ARGSPEC,
         ("argument 'descheduler_max_evictions_total'",)),
    Case("scheduler config URL is not http(s)", "scheduler_config",
         {"scheduler_config_extender_url": "ftp://tas-extender:9001"}, "Check the extender settings",
         ("scheduler_config_extender_url", "ftp://tas-extender:9001")),
    Case("scheduler config weight zero", "scheduler_config", {"scheduler_config_weight": 0},
         "Check the extender settings", ("scheduler_config_weight must be positive (got 0)",)),
    Case("scheduler config https without the client certificate", "scheduler_config",
         {"scheduler_config_extender_url": "https://127.0.0.1:9001",
          "scheduler_config_client_cert": f"{MISSING}/client.crt",
          "scheduler_config_client_key": f"{MISSING}/client.key", "scheduler_config_ca": f"{MISSING}/ca.crt"},
         "Stop when a TLS file is missing", ("scheduler_config_client_cert", f"{MISSING}/client.crt")),
    Case("every pod sent to an in-cluster extender that cannot be skipped", "scheduler_config",
         {"tas_load_aware": True, "scheduler_config_load_ignorable": False},
         "Refuse sending every pod to an in-cluster extender that cannot be skipped",
         ("scheduler_config_load_ignorable is false", "not even the extender's own new ones")),
    Case("scheduler config for Kubernetes 1.22", "scheduler_config",
         {"scheduler_config_extender_url": "http://127.0.0.1:9001", "scheduler_config_kubernetes_version": "v1.22.17"},
         "Refuse Kubernetes versions without a KubeSchedulerConfiguration that takes extenders",
         ("Kubernetes 1.22 is not supported", "scheduler_config_kubernetes_version")),
    Case("extender variable misspelt", "extender", {"extender_replica": 3},
         "Check that every extender_* variable is one the role knows",
         ("Unknown variable for role extender: extender_replica (did you mean extender_replicas?)",)),
    Case("node_exporter variable renamed in 0.2.0", "node_exporter", {"node_exporter_textfile_dir": "/srv/metrics"},
         "Check that every node_exporter_* variable is one the role knows", ("node_exporter_textfile_dir",)),
    # The adapter's variable starts with prometheus_ too: the prometheus role names only its own.
    Case("prometheus variable misspelt beside an adapter variable", "prometheus",
         {"prometheus_scrape_intervall": "5s", "prometheus_adapter_metric_prefix": "node_"},
         "Check that every prometheus_* variable is one the role knows",
         ("Unknown variable for role prometheus: prometheus_scrape_intervall (did you mean prometheus_scrape_interval?)."
          " Rename or remove it",)),
    # Installed beside prometheus.prometheus, whose roles node_exporter and prometheus share our
    # roles' prefixes: its variables are its own, ours are still checked.
    Case("prometheus.prometheus's node_exporter variables beside a misspelt one of ours", "node_exporter",
         {"node_exporter_version": "1.9.0", "node_exporter_textfile_dir": "/srv/metrics",
          "node_exporter_web_listen_address": "127.0.0.1:9100", "node_exporter_colectors": ["cpu"]},
         "Check that every node_exporter_* variable is one the role knows",
         ("Unknown variable for role node_exporter: node_exporter_colectors (did you mean node_exporter_collectors?)."
          " Rename or remove it", "node_exporter_version: - prometheus.prometheus.node_exporter",
          "node_exporter_textfile_dir: - prometheus.prometheus.node_exporter"), beside=True),
    Case("prometheus.prometheus's prometheus variables pass the check", "prometheus",
         {"prometheus_version": "3.5.0", "prometheus_global": {"scrape_interval": "15s"},
          "prometheus_scrape_configs": [], "prometheus_grafana_namespace": "Grafana NS"},
         "Check where the dashboard goes", ("prometheus_grafana_namespace", "got 'Grafana NS'"),
         not_says=("Unknown variable",), beside=True),
    Case("grafana namespace is not a namespace name", "prometheus", {"prometheus_grafana_namespace": "Grafana NS"},
         "Check where the dashboard goes", ("prometheus_grafana_namespace", "got 'Grafana NS'")),
    Case("eviction cap of the alert is zero", "prometheus", {"prometheus_alerts_descheduler_node_cap": 0},
         "Check the descheduler's cap the eviction alert compares with",
         ("prometheus_alerts_descheduler_node_cap", "got '0'")),
    Case("existing adapter without the name of its ConfigMap", "prometheus_adapter",
         {"prometheus_adapter_deploy_mode": "existing", "prometheus_adapter_existing_configmap": ""},
         "Check the existing adapter's names", ("prometheus_adapter_existing_configmap",)),
    Case("scheduler config mode is not a choice", "scheduler_config", {"scheduler_config_mode": "static"}, ARGSPEC,
         ("value of scheduler_config_mode must be one of: service, kubeadm, second_scheduler, got: static",)),
    Case("second scheduler named as the default one", "scheduler_config",
         {"scheduler_config_mode": "second_scheduler", "scheduler_config_second_scheduler_name": "default-scheduler"},
         "Check the second scheduler's settings", ("scheduler_config_second_scheduler_name", "default-scheduler")),
    # The registry settings are the collection's: every role that runs pods checks them first.
    Case("registry given as a URL", "extender", {"tas_image_registry": "https://registry.example.com"},
         REGISTRY_CHECK, ("no scheme (https://)", "Got 'https://registry.example.com'")),
    Case("registry with a trailing slash", "node_exporter", {"tas_image_registry": "registry.example.com/mirror/"},
         REGISTRY_CHECK, ("no trailing slash", "Got 'registry.example.com/mirror/'")),
    Case("registry a runtime would take for a Docker Hub account", "prometheus", {"tas_image_registry": "mirror/images"},
         REGISTRY_CHECK, ("would be taken for a Docker Hub account", "Got 'mirror/images'")),
    Case("registry password without a user", "descheduler",
         {"tas_image_registry": "registry.example.com", "tas_image_registry_password": "s3cret-password"},
         "Check the registry credentials", ("go together", "a password set"), not_says=("s3cret-password",)),
    Case("registry credentials without a registry", "certificates",
         {"tas_image_registry_username": "robot", "tas_image_registry_password": "s3cret-password"},
         "Check the registry credentials", ("for the registry tas_image_registry names", "registry ''"),
         not_says=("s3cret-password",)),
    Case("pull Secret that is not a name", "health_metric_demo", {"tas_image_pull_secrets": ["My Registry"]},
         "Check the names of the pull Secrets", ("tas_image_pull_secrets", "My Registry")),
    Case("registry user with a colon", "scheduler_config",
         {"tas_image_registry": "registry.example.com", "tas_image_registry_username": "robot:ci",
          "tas_image_registry_password": "s3cret-password"},
         "Check the registry credentials", ("The username may not contain a colon",), not_says=("s3cret-password",)),
]


def _run(case: Case, directory: pathlib.Path) -> subprocess.CompletedProcess:
    playbook = directory / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": f"Run intel.tas.{case.role} with a wrong input",
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "roles": [{"role": f"intel.tas.{case.role}", "vars": case.wrong}],
    }], sort_keys=False))
    collections = [str(REPO / "collections")] + ([str(REPO / "tests/fixtures/collections")] if case.beside else [])
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(collections),
           "ANSIBLE_LOCAL_TEMP": str(directory / "tmp"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    if (REPO / "ansible.cfg").exists():
        env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    # localhost only, whatever the configured inventory holds: nothing else is touched.
    return subprocess.run(
        [str(pathlib.Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", str(playbook)],
        cwd=directory, env=env, capture_output=True, text=True, timeout=PLAYBOOK_TIMEOUT)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every case's playbook run, started together: each costs seconds of Ansible start-up."""
    directories = {case.id: tmp_path_factory.mktemp("role-input") for case in CASES}
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {case.id: pool.submit(_run, case, directories[case.id]) for case in CASES}
        return {name: future.result() for name, future in futures.items()}


def _failed_task(output: str) -> str:
    """The name of the task the play failed at (the last TASK header before 'fatal:')."""
    before = output.split("fatal:", 1)[0]
    headers = re.findall(r"^TASK \[(?:[\w.]+ : )?(.+?)\]", before, flags=re.MULTILINE)
    return headers[-1] if headers else ""


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_wrong_input_stops_the_role_before_it_acts_naming_the_variable(runs, case):
    result = runs[case.id]
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert _failed_task(output).startswith(case.failing_task), output
    recap = re.search(r"^localhost\s*:.*$", output, flags=re.MULTILINE)
    assert recap and "changed=0" in recap.group(0) and "failed=1" in recap.group(0), output
    for text in case.says:
        assert text in " ".join(output.split()), f"{text!r} not in the output:\n{output}"
    for text in case.not_says:
        assert text not in output, f"{text!r} in the output:\n{output}"
