"""The descheduler role's policy: the caps, the label selector and the namespace scope land where
the descheduler reads them, in the format its version reads; and its CronJob, whose dry run
may not evict.

The template is rendered with Jinja and the two Ansible plugins it uses (the `version` test and
`to_json`); the result is parsed as the descheduler would, as YAML. That the real descheduler
v0.36.0 accepts it and evicts by it is shown on the clusters (molecule scenarios).
"""

from __future__ import annotations

import json
import pathlib

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import to_bool
from ansible.plugins.test.core import version_compare

ROLE = pathlib.Path(__file__).resolve().parents[3] / "collections/ansible_collections/intel/tas/roles/descheduler"
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())


def template_environment() -> jinja2.Environment:
    """Jinja as Ansible renders the role's templates, with the plugins they use."""
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    environment.tests["version"] = version_compare
    environment.filters.update(to_json=json.dumps, bool=to_bool)
    return environment


def policy(version: str, **overrides) -> dict:
    environment = template_environment()
    api = "descheduler/v1alpha2" if version_compare(version, "0.27.0", ">=") else "descheduler/v1alpha1"
    variables = {**DEFAULTS, **overrides, "ansible_managed": "managed", "__descheduler_version": version,
                 "__descheduler_policy_api": api}
    text = environment.from_string((ROLE / "templates/policy.yaml.j2").read_text()).render(variables)
    return yaml.safe_load(text)


def test_the_defaults_cap_each_run_per_node_namespace_and_in_total():
    rendered = policy("0.36.0")
    assert (rendered["maxNoOfPodsToEvictPerNode"], rendered["maxNoOfPodsToEvictPerNamespace"],
            rendered["maxNoOfPodsToEvictTotal"]) == (5, 10, 20)
    assert rendered["evictionFailureEventNotification"] is True


def test_only_pods_of_a_telemetry_policy_are_evicted_for_node_affinity():
    args = {c["name"]: c["args"] for c in policy("0.36.0")["profiles"][0]["pluginConfig"]}
    assert args["RemovePodsViolatingNodeAffinity"]["labelSelector"] == {
        "matchExpressions": [{"key": "telemetry-policy", "operator": "Exists"}]}
    assert args["DefaultEvictor"] == {"nodeFit": True}
    assert "namespaces" not in args["RemovePodsViolatingNodeAffinity"]


def test_a_null_cap_is_no_cap():
    rendered = policy("0.36.0", descheduler_max_evictions_per_node=None, descheduler_max_evictions_total=None)
    assert "maxNoOfPodsToEvictPerNode" not in rendered and "maxNoOfPodsToEvictTotal" not in rendered
    assert rendered["maxNoOfPodsToEvictPerNamespace"] == 10


@pytest.mark.parametrize(("key", "names"), [("include", ["shop", "batch"]), ("exclude", ["kube-system"])])
def test_the_namespace_scope_goes_to_the_plugin(key, names):
    rendered = policy("0.36.0", **{f"descheduler_namespaces_{key}": names})
    args = {c["name"]: c["args"] for c in rendered["profiles"][0]["pluginConfig"]}
    assert args["RemovePodsViolatingNodeAffinity"]["namespaces"] == {key: names}


def test_versions_before_the_event_setting_do_not_get_it():
    assert "evictionFailureEventNotification" not in policy("0.32.0")


def test_the_v1alpha1_format_gets_the_caps_it_knows():
    rendered = policy("0.23.1", descheduler_max_evictions_total=None, descheduler_namespaces_exclude=["kube-system"])
    assert rendered["apiVersion"] == "descheduler/v1alpha1"
    assert (rendered["maxNoOfPodsToEvictPerNode"], rendered["maxNoOfPodsToEvictPerNamespace"]) == (5, 10)
    assert "maxNoOfPodsToEvictTotal" not in rendered
    params = rendered["strategies"]["RemovePodsViolatingNodeAffinity"]["params"]
    assert params["namespaces"] == {"exclude": ["kube-system"]}


def cronjob(**overrides) -> dict[str, dict]:
    """The kubernetes mode's objects by kind, the policy itself left out (rendered above)."""
    environment = template_environment()
    environment.globals["lookup"] = lambda kind, name: "{}"
    text = environment.from_string((ROLE / "templates/cronjob.yaml.j2").read_text()).render({**DEFAULTS, **overrides})
    return {document["kind"]: document for document in yaml.safe_load_all(text) if document}


def test_the_descheduler_evicts_and_records_events_by_default():
    objects = cronjob()
    container = objects["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert "--dry-run" not in container["command"]
    granted = {(resource, verb) for rule in objects["ClusterRole"]["rules"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert {("pods/eviction", "create"), ("events", "create")} <= granted


def test_a_dry_run_is_told_so_and_may_not_evict_or_write_anything():
    objects = cronjob(descheduler_dry_run=True)
    container = objects["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-1] == "--dry-run"
    verbs = {verb for rule in objects["ClusterRole"]["rules"] for verb in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}
