"""prometheus_adapter_deploy_mode: existing on the real-node cluster: a platform team's
prometheus-adapter (their-adapter.yaml, as its Helm chart makes it) serves the custom metrics
API before the collection comes; site.yml (its adapter role) adds our rule to its
configuration and leaves its APIService and Deployment as they were, the extender decides by
health read through it, and removal gives its configuration back byte for byte.

Our own adapter is removed for this module and put back afterwards.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from support import REPO, get_raw, served_health, wait_for
from support.incluster import (DEADLINE, WORKERS, ansible_playbook, client_tls, filter_rejects, kubectl,
                               set_health)

MANIFEST = REPO / "tests" / "incluster" / "their-adapter.yaml"
ADAPTER = "tests/incluster/adapter.yml"
NS, NAME, KEY = "monitoring", "prometheus-adapter", "config.yaml"
BEGIN = "# BEGIN intel.tas rules"


def theirs(api_client) -> dict[str, object]:
    """What belongs to the platform team: the configuration's text, the Deployment's spec and
    generation, the APIService's spec."""
    deployment = client.AppsV1Api(api_client).read_namespaced_deployment(NAME, NS)
    apiservice = client.ApiregistrationV1Api(api_client).read_api_service("v1beta1.custom.metrics.k8s.io")
    return {"config": client.CoreV1Api(api_client).read_namespaced_config_map(NAME, NS).data[KEY],
            "deployment": (deployment.metadata.generation, api_client.sanitize_for_serialization(deployment.spec)),
            "apiservice": api_client.sanitize_for_serialization(apiservice.spec)}


def their_pods(api_client) -> set[str]:
    pods = client.CoreV1Api(api_client).list_namespaced_pod(
        NS, label_selector="app.kubernetes.io/name=their-prometheus-adapter").items
    return {p.metadata.uid for p in pods if not p.metadata.deletion_timestamp}


def served(api_client) -> list[str]:
    """The metrics the custom metrics API lists (resource/metric)."""
    return [r["name"] for r in json.loads(get_raw(api_client, "/apis/custom.metrics.k8s.io/v1beta1"))["resources"]]


def available(api_client) -> bool:
    status = client.ApiregistrationV1Api(api_client).read_api_service("v1beta1.custom.metrics.k8s.io").status
    return any(c.type == "Available" and c.status == "True" for c in (status.conditions or []))


@pytest.fixture(scope="module")
def existing(api_client):
    ansible_playbook(ADAPTER, "-e", "tas_state=absent")
    try:
        kubectl("apply", "-f", str(MANIFEST))
        wait_for(lambda: client.AppsV1Api(api_client).read_namespaced_deployment(NAME, NS).status.ready_replicas == 1
                 and available(api_client), DEADLINE, "the platform team's adapter serving the custom metrics API")
        before = theirs(api_client)
        # the role in its default mode will not take the API over
        refused = ansible_playbook(ADAPTER, succeed=False)
        # site.yml's adapter role alone (its tag): the rest of the stack is installed already
        ansible_playbook("playbooks/site.yml", "--tags", "prometheus_adapter",
                         "-e", "prometheus_adapter_deploy_mode=existing")
        yield before, refused
    finally:
        # theirs gone, ours back, for the modules after this one
        kubectl("delete", "--wait", "--ignore-not-found", "-f", str(MANIFEST))
        ansible_playbook(ADAPTER)
    assert set(served_health(api_client)) >= set(WORKERS)


def test_the_default_mode_refuses_to_take_over_another_adapters_api(existing):
    refused = existing[1]
    assert refused.returncode != 0
    assert "v1beta1.custom.metrics.k8s.io is served by monitoring/prometheus-adapter" in refused.stdout, refused.stdout[-3000:]
    assert "prometheus_adapter_deploy_mode: existing" in refused.stdout


def test_their_apiservice_and_deployment_are_as_they_were(api_client, existing):
    now, before = theirs(api_client), existing[0]
    assert now["apiservice"] == before["apiservice"]
    assert now["deployment"] == before["deployment"]


def test_our_rule_is_added_and_every_byte_of_their_configuration_kept(api_client, existing):
    text = theirs(api_client)["config"]
    assert BEGIN in text
    start, end = text.index(BEGIN), text.index("# END intel.tas rules")
    block_start = text.rindex("\n", 0, start) + 1
    block_end = text.index("\n", end) + 1
    assert text[:block_start] + text[block_end:] == existing[0]["config"]


def test_the_custom_metrics_api_serves_every_workers_health_through_their_adapter(api_client, existing):
    wait_for(lambda: set(served_health(api_client)) >= set(WORKERS), DEADLINE, "health_metric of every worker")


def test_the_extender_decides_by_health_read_through_their_adapter(api_client, existing):
    core = client.CoreV1Api(api_client)
    set_health("node-2", 1)
    try:
        wait_for(lambda: filter_rejects(core, client_tls(), "node-2"), DEADLINE, "the filter to reject node-2")
    finally:
        set_health("node-2", 0)
    wait_for(lambda: not filter_rejects(core, client_tls(), "node-2"), DEADLINE, "the filter to pass node-2 again")


def test_running_again_changes_nothing_and_replaces_no_pod(api_client, existing):
    pods, config = their_pods(api_client), client.CoreV1Api(api_client).read_namespaced_config_map(NAME, NS)
    run = ansible_playbook(ADAPTER, "-e", "prometheus_adapter_deploy_mode=existing")
    assert "changed=0" in run.stdout, run.stdout[-3000:]
    assert their_pods(api_client) == pods
    assert client.CoreV1Api(api_client).read_namespaced_config_map(NAME, NS).metadata.resource_version == \
        config.metadata.resource_version


def test_removal_gives_their_configuration_back_byte_for_byte(api_client, existing):
    ansible_playbook(ADAPTER, "-e", "prometheus_adapter_deploy_mode=existing", "-e", "tas_state=absent")
    assert theirs(api_client) == existing[0]
    # their pods replaced again: what the API serves is their rules' alone
    wait_for(lambda: available(api_client) and "nodes/health_metric" not in served(api_client), DEADLINE,
             "their adapter serving its own rules only")
