"""Every extender variable reaches the process in both modes: the host service's command line
and the Deployment's container arguments, as the role renders them.

The two used to be written separately and kubernetes mode lost `extender_log_level` and
`extender_metric_max_age` without a word. One `ansible-playbook` run per mode renders the role's
own vars and template with distinctive values; each must appear as its flag in both.
"""

from __future__ import annotations

import pytest

from support import REPO
from support.render import rendered

ROLE = REPO / "collections/ansible_collections/intel/tas/roles/extender"

VALUES = {
    "extender_port": 9443,
    "extender_sync_period": "7s",
    "extender_metrics_source": "prometheus",
    "extender_missing_metrics": "fail-closed",
    "extender_namespace": "tas-args-test",
    "extender_log_level": "debug",
    "extender_metric_max_age": "45s",
    "extender_extra_args": ["--an-extra=flag"],
    "tas_load_aware": True,
    "extender_load_prometheus_url": "http://prometheus.example:9090",
    "extender_load_weight": 2.5,
    "tas_extended_resource": "example.com/tas-slots",
    "extender_extended_resource_quantity": "5",
    "extender_requeue_on_recovery": False,
}
EXPECTED = [
    "--port=9443", "--syncPeriod=7s", "--metrics-source=prometheus", "--missing-metrics=fail-closed",
    "--lease-namespace=tas-args-test", "--log-level=debug", "--metric-max-age=45s", "--an-extra=flag",
    "--load-aware", "--load-prometheus-url=http://prometheus.example:9090", "--load-weight=2.5",
    "--advertise-resource=example.com/tas-slots=5", "--no-requeue-on-recovery",
]


def rendered_arguments(mode: str, values: dict) -> list[str]:
    """The arguments the role gives tas-extender in one mode, rendered by Ansible itself."""
    if mode == "host":
        expression = "{{ _extender_command[2:] }}"
    else:
        expression = ("{{ (lookup('ansible.builtin.template', role_dir ~ '/templates/deployment.yaml.j2')"
                      " | from_yaml_all | selectattr('kind', 'eq', 'Deployment') | first)"
                      ".spec.template.spec.containers[0].args }}")
    return rendered(ROLE, expression, dict(values, extender_deploy_mode=mode))


@pytest.mark.parametrize("mode", ["host", "kubernetes"])
def test_every_variable_reaches_the_extender(mode):
    arguments = rendered_arguments(mode, VALUES)
    missing = [flag for flag in EXPECTED if flag not in arguments]
    assert not missing, f"{mode} mode lacks {missing}: {arguments}"


@pytest.mark.parametrize(("mode", "url"), [
    ("kubernetes", "http://tas-prometheus.monitoring.svc:9090"),
    ("host", "http://127.0.0.1:9090"),
])
def test_load_mode_asks_the_prometheus_role_of_its_own_mode_by_default(mode, url):
    arguments = rendered_arguments(mode, {"tas_load_aware": True})
    assert f"--load-prometheus-url={url}" in arguments, arguments


@pytest.mark.parametrize("mode", ["host", "kubernetes"])
def test_advertising_the_resource_is_on_by_default_and_off_when_something_else_does_it(mode):
    assert "--advertise-resource=telemetry/scheduling=1000" in rendered_arguments(mode, {})
    off = rendered_arguments(mode, {"extender_advertise_extended_resource": False})
    assert "--no-advertise-resource" in off and not any(a.startswith("--advertise-resource") for a in off)


@pytest.mark.parametrize("mode", ["host", "kubernetes"])
def test_requeueing_on_recovery_is_on_without_a_flag_and_off_by_its_variable(mode):
    assert not [a for a in rendered_arguments(mode, {}) if "requeue-on-recovery" in a]
    assert "--no-requeue-on-recovery" in rendered_arguments(mode, {"extender_requeue_on_recovery": False})


def test_the_two_modes_differ_only_in_paths():
    mode_specific = ("--kubeconfig=", "--health-port=", "--cert=", "--key=", "--cacert=", "--load-policy=")

    def common(mode: str) -> list[str]:
        return [argument for argument in rendered_arguments(mode, VALUES) if not argument.startswith(mode_specific)]

    assert common("host") == common("kubernetes")
