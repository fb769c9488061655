"""Fixtures of the in-cluster checks: the real-node cluster after playbooks/site.yml ran on it
with the roles' defaults (molecule scenario realnode); api_client (tests/conftest.py) follows
this kubeconfig. Their helpers are in support/incluster.py."""

from __future__ import annotations

import pytest
from kubernetes import client

from support import REAL_CLUSTER_DIR, ready_kubeconfig, wait_for
from support.incluster import DEADLINE, WORKERS, set_health, violating

# Run after every other module, in this order: the one that may end with the install changed,
# then the RBAC check, which reads what all the others made the extender ask for.
LAST = ("test_load_aware.py", "test_rbac_used.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # stable: every other module keeps its order, first
    items.sort(key=lambda item: LAST.index(item.path.name) + 1 if item.path.name in LAST else 0)


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    return ready_kubeconfig(str(REAL_CLUSTER_DIR / "kubeconfig"), "make demo")


@pytest.fixture
def healthy_nodes_after(api_client):
    """Whatever a test did to the nodes' health, it is 0 again afterwards, and the extender has
    seen it: no worker is labelled violating. (A label left over from one test lets the next see
    "node-1 labelled violating" at once and have it lifted under it when the old value arrives.)"""
    yield
    for node in WORKERS:
        set_health(node, 0)
    core = client.CoreV1Api(api_client)
    wait_for(lambda: not any(violating(core, n) for n in WORKERS), DEADLINE, "every worker's violating label lifted")
