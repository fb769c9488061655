"""Fixtures of the integration tests against the local cluster's real API server: the TASPolicy
CRD installed, and an extender serving on it with metrics from a file the test writes. The
fixtures kubeconfig, api_client and namespace come from tests/conftest.py."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from kubernetes import client

from support import free_port, serving_extender, tas_extender_command, wait_for
from support.controller import DEADLINE, Metrics, refuse_a_provisioned_extender, serve_args


@pytest.fixture(scope="module")
def crd(api_client):
    refuse_a_provisioned_extender(api_client)
    manifest = yaml.safe_load(subprocess.run(
        [tas_extender_command(), "crd"],
        capture_output=True, text=True, check=True).stdout)
    ext = client.ApiextensionsV1Api(api_client)
    try:
        ext.create_custom_resource_definition(manifest)
    except client.ApiException as error:
        if error.status != 409:
            raise
        current = ext.read_custom_resource_definition(manifest["metadata"]["name"])
        manifest["metadata"]["resourceVersion"] = current.metadata.resource_version
        ext.replace_custom_resource_definition(manifest["metadata"]["name"], manifest)
    wait_for(lambda: any(c.type == "Established" and c.status == "True" for c in
                         ext.read_custom_resource_definition(manifest["metadata"]["name"]).status.conditions or []),
             DEADLINE, "CRD established")
    return manifest


@pytest.fixture
def extender(kubeconfig, crd, tmp_path, namespace):
    port = free_port()
    metrics = Metrics(tmp_path / "metrics.prom", port)
    with serving_extender(serve_args(kubeconfig, metrics, namespace), port, tmp_path / "extender.log", DEADLINE):
        yield metrics
