"""Every pod the collection runs pulls its images from tas_image_registry with the pull Secrets
given, and with the defaults nothing changes.

Each role's pod template is rendered by Ansible itself (tests/support/render.py: the role's
defaults and vars, the collection's filters), all of them in one ansible-playbook run, for three
settings: the defaults; a registry, a pull Secret of the user's and registry credentials; and the
same with every image variable set to a name pinned by digest, which must be used as given. Then
the image_registry role: the pull Secret it makes, and when its removal deletes one.
"""

from __future__ import annotations

import re

import pytest
import yaml

from support.render import COLLECTION, rendered_each

ROLES = COLLECTION / "roles"
EXTENDER_VERSION = yaml.safe_load((ROLES / "extender/defaults/main.yml").read_text())["extender_version"]
REGISTRY = "registry.example.com:5000/mirror"
DIGEST = "sha256:" + "0123456789abcdef" * 4

# The template of each role that runs pods, and what a play has computed by the time it is applied.
TEMPLATES = {
    "certificates": ("renewal.yaml.j2", {}),
    "descheduler": ("cronjob.yaml.j2", {"__descheduler_version": "0.36.0", "__descheduler_policy_api": "descheduler/v1alpha2"}),
    "extender": ("deployment.yaml.j2", {}),
    "health_metric_demo": ("demo.yaml.j2", {}),
    "node_exporter": ("daemonset.yaml.j2", {}),
    "prometheus": ("kubernetes.yaml.j2", {}),
    "prometheus_adapter": ("apiservice.yaml.j2", {}),
    "scheduler_config": ("second-scheduler.yaml.j2", {
        "scheduler_config_mode": "second_scheduler", "scheduler_config_kubernetes_version": "v1.36.3",
        "__scheduler_config_minor": 36, "__scheduler_config_second_checksum": "0"}),
}
# The images each role's pods run with the defaults, as before tas_image_registry, and where the
# registry puts them (the repository path and tag kept).
DEFAULT_IMAGES = {
    "certificates": f"tas-extender:{EXTENDER_VERSION}",
    "descheduler": "registry.k8s.io/descheduler/descheduler:v0.36.0",
    "extender": f"tas-extender:{EXTENDER_VERSION}",
    "health_metric_demo": "registry.k8s.io/pause:3.10.2",
    "node_exporter": "quay.io/prometheus/node-exporter:v1.8.2",
    "prometheus": "quay.io/prometheus/prometheus:v2.53.2",
    "prometheus_adapter": "registry.k8s.io/prometheus-adapter/prometheus-adapter:v0.12.0",
    "scheduler_config": "registry.k8s.io/kube-scheduler:v1.36.3",
}
REGISTRY_IMAGES = {
    "certificates": f"{REGISTRY}/tas-extender:{EXTENDER_VERSION}",
    "descheduler": f"{REGISTRY}/descheduler/descheduler:v0.36.0",
    "extender": f"{REGISTRY}/tas-extender:{EXTENDER_VERSION}",
    "health_metric_demo": f"{REGISTRY}/pause:3.10.2",
    "node_exporter": f"{REGISTRY}/prometheus/node-exporter:v1.8.2",
    "prometheus": f"{REGISTRY}/prometheus/prometheus:v2.53.2",
    "prometheus_adapter": f"{REGISTRY}/prometheus-adapter/prometheus-adapter:v0.12.0",
    "scheduler_config": f"{REGISTRY}/kube-scheduler:v1.36.3",
}
# Each role's image variables, set to names of the user's pinned by digest.
EXPLICIT = {
    "certificates": {"certificates_renewal_image": f"other.example.com/renewal:1@{DIGEST}"},
    "descheduler": {"descheduler_image": f"other.example.com/descheduler@{DIGEST}"},
    "extender": {"extender_image": f"other.example.com/tas-extender:{EXTENDER_VERSION}@{DIGEST}"},
    "health_metric_demo": {"health_metric_demo_image": f"other.example.com/pause@{DIGEST}"},
    "node_exporter": {"node_exporter_image": f"other.example.com/node-exporter:v1.8.2@{DIGEST}"},
    "prometheus": {"prometheus_image": f"other.example.com/prometheus@{DIGEST}"},
    "prometheus_adapter": {"prometheus_adapter_image": f"other.example.com/prometheus-adapter@{DIGEST}"},
    "scheduler_config": {"scheduler_config_second_scheduler_image": f"other.example.com/kube-scheduler@{DIGEST}"},
}
WITH_REGISTRY = {"tas_image_registry": REGISTRY, "tas_image_pull_secrets": ["mine"],
                 "tas_image_registry_username": "robot", "tas_image_registry_password": "s3cret"}
SETTINGS = {
    "defaults": lambda role: {},
    "registry": lambda role: WITH_REGISTRY,
    "explicit": lambda role: {"tas_image_registry": REGISTRY, "tas_image_pull_secrets": ["mine"], **EXPLICIT[role]},
}


def pod_specs(documents: list[dict]) -> dict[str, dict]:
    """"<kind>/<name>" -> the pod spec of every object that runs pods."""
    specs = {}
    for document in documents:
        key = f"{document['kind']}/{document['metadata']['name']}"
        if document["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            specs[key] = document["spec"]["template"]["spec"]
        elif document["kind"] == "CronJob":
            specs[key] = document["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif document["kind"] == "Pod":
            specs[key] = document["spec"]
    return specs


@pytest.fixture(scope="module")
def rendered() -> dict[tuple[str, str], dict[str, dict]]:
    """(role, setting) -> the pod specs of the role's template."""
    keys = [(role, setting) for role in TEMPLATES for setting in SETTINGS]
    renders = []
    for role, setting in keys:
        template, computed = TEMPLATES[role]
        expression = ("{{ lookup('ansible.builtin.template', role_dir ~ '/templates/" + template + "')"
                      " | from_yaml_all | select | list }}")
        renders.append((ROLES / role, expression, {**computed, **SETTINGS[setting](role)}))
    return {key: pod_specs(documents) for key, documents in zip(keys, rendered_each(renders))}


def images(spec: dict) -> list[str]:
    return [container["image"] for container in spec.get("initContainers", []) + spec["containers"]]


@pytest.mark.parametrize("role", TEMPLATES)
def test_with_the_defaults_every_image_is_as_before_and_no_pod_names_a_pull_secret(rendered, role):
    specs = rendered[role, "defaults"]
    assert specs, f"{role} renders no pod"
    for name, spec in specs.items():
        assert set(images(spec)) == {DEFAULT_IMAGES[role]}, name
        assert "imagePullSecrets" not in spec, name


@pytest.mark.parametrize("role", TEMPLATES)
def test_with_a_registry_every_image_comes_from_it_and_every_pod_pulls_with_the_secrets(rendered, role):
    for name, spec in rendered[role, "registry"].items():
        assert set(images(spec)) == {REGISTRY_IMAGES[role]}, name
        assert spec["imagePullSecrets"] == [{"name": "mine"}, {"name": "tas-registry"}], name


@pytest.mark.parametrize("role", TEMPLATES)
def test_an_image_the_user_names_is_used_as_given_digest_and_all(rendered, role):
    (given,) = EXPLICIT[role].values()
    for name, spec in rendered[role, "explicit"].items():
        assert set(images(spec)) == {given}, name
        # no credentials given: the user's Secret alone
        assert spec["imagePullSecrets"] == [{"name": "mine"}], name


def test_every_template_with_pods_and_every_image_variable_is_covered():
    with_pods = {path.parent.parent.name: path.name for path in ROLES.glob("*/templates/*.j2")
                 if re.search(r"^\s*containers:", path.read_text(), re.M)}
    assert with_pods == {role: template for role, (template, _) in TEMPLATES.items()}
    image_variables = {name for path in ROLES.glob("*/defaults/main.yml")
                       for name in yaml.safe_load(path.read_text()) if name.endswith("_image")}
    assert image_variables == {name for variables in EXPLICIT.values() for name in variables}


# The image_registry role: the Secret it makes, and when its removal deletes it. Its decisions are
# rendered from what its tasks read (the Secret and the namespace's workloads), given here.
def _secret(labels: dict | None) -> dict:
    return {"resources": [] if labels is None else [{"metadata": {"name": "tas-registry", "labels": labels}}]}


def _workloads(**pull_secrets_by_kind: list[str]) -> dict:
    results = []
    for kind, names in pull_secrets_by_kind.items():
        pod = {"spec": {"containers": [], **({"imagePullSecrets": [{"name": n} for n in names]} if names else {})}}
        spec = {"jobTemplate": {"spec": {"template": pod}}} if kind == "CronJob" else {"template": pod}
        results.append({"resources": [{"kind": kind, "metadata": {"name": f"tas-{kind.lower()}"}, "spec": spec}]})
    return {"results": results}


OURS = {"app.kubernetes.io/managed-by": "intel.tas"}
REMOVALS = {
    "no such Secret: nothing to delete": (_secret(None), _workloads(), False, []),
    "a Secret of the user's of that name (no label): never ours": (_secret({}), _workloads(), False, []),
    "ours, a CronJob still pulls with it: kept for it": (
        _secret({**OURS, "team": "x"}), _workloads(CronJob=["tas-registry"], Deployment=[]), True, ["CronJob/tas-cronjob"]),
    "ours, the workloads left pull with other Secrets: deleted": (
        _secret(OURS), _workloads(DaemonSet=["mine"], Job=[]), True, []),
}
DECISIONS = "{{ {'made': _image_registry_made, 'ours': __image_registry_ours, 'users': __image_registry_users} }}"


@pytest.fixture(scope="module")
def registry_role() -> dict[str, object]:
    """The role's decisions for each removal above, and the Secret's content with credentials."""
    role = ROLES / "image_registry"
    renders = [(role, DECISIONS, {"__image_registry_secret": secret, "__image_registry_workloads": workloads})
               for secret, workloads, _, _ in REMOVALS.values()]
    renders.append((role, "{{ {'made': _image_registry_made, 'config': _image_registry_docker_config} }}", WITH_REGISTRY))
    results = rendered_each(renders)
    return {**dict(zip(REMOVALS, results)), "credentials": results[-1]}


@pytest.mark.parametrize("case", REMOVALS)
def test_removal_deletes_only_the_collections_secret_and_only_once_no_workload_pulls_with_it(registry_role, case):
    _, _, ours, users = REMOVALS[case]
    assert registry_role[case] == {"made": False, "ours": ours, "users": users}


def test_the_secret_holds_the_credentials_for_the_registrys_host_as_docker_login_writes_them(registry_role):
    assert registry_role["credentials"] == {"made": True, "config": {"auths": {"registry.example.com:5000": {
        "username": "robot", "password": "s3cret", "auth": "cm9ib3Q6czNjcmV0"}}}}
