"""Fixtures of the real-node cluster's tests: its kubeconfig (never the KWOK cluster's)."""

from __future__ import annotations

import os
import pathlib
import uuid
from collections.abc import Iterator

import pytest

from support import get_raw

REAL_CLUSTER_DIR = pathlib.Path(
    os.environ.get("TAS_REAL_CLUSTER_DIR", pathlib.Path.home() / ".local" / "state" / "tas-real-cluster")
)


@pytest.fixture(scope="session")
def real_cluster_dir() -> pathlib.Path:
    return REAL_CLUSTER_DIR


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    """Admin kubeconfig of the real-node cluster; fails (never skips) when it is not up."""
    from kubernetes import config

    path = REAL_CLUSTER_DIR / "kubeconfig"
    if not path.exists():
        pytest.fail(f"no kubeconfig at {path}: bring the real-node cluster up first (make real-cluster)")
    api = config.new_client_from_config(config_file=str(path))
    try:
        assert get_raw(api, "/readyz").strip() == b"ok"
    finally:
        api.close()
    return str(path)


@pytest.fixture(scope="session")
def api_client(kubeconfig: str) -> Iterator[object]:
    from kubernetes import config

    api = config.new_client_from_config(config_file=kubeconfig)
    yield api
    api.close()


@pytest.fixture
def namespace(api_client) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards with everything in it."""
    from kubernetes import client

    name = f"realnode-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)
