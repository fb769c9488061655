"""Fixtures of the real-node cluster's tests: its kubeconfig (never the KWOK cluster's);
api_client (tests/conftest.py) follows it."""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Iterator

import pytest

from support import REAL_CLUSTER_DIR, ready_kubeconfig


@pytest.fixture(scope="session")
def real_cluster_dir() -> pathlib.Path:
    return REAL_CLUSTER_DIR


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    return ready_kubeconfig(str(REAL_CLUSTER_DIR / "kubeconfig"), "make real-cluster")


@pytest.fixture
def namespace(api_client) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards with everything in it."""
    from kubernetes import client

    name = f"realnode-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)
