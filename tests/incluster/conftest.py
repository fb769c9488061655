"""Fixtures of the in-cluster checks: the real-node cluster after playbooks/site.yml ran on it
with the roles' defaults (molecule scenario realnode); api_client (tests/conftest.py) follows
this kubeconfig."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from support import REAL_CLUSTER_DIR, REPO, ready_kubeconfig

EXTENDER_NS, MONITORING_NS, ADAPTER_NS = "telemetry-aware-scheduling", "monitoring", "custom-metrics"
WORKERS = ["node-1", "node-2", "node-3"]

# Set by molecule's verify, which removes everything right after these tests: a module that
# changed the install's variables then leaves them so, instead of a site.yml run (minutes here)
# that puts the defaults back for nobody. Run by hand, the tests leave the defaults behind.
REMOVAL_FOLLOWS = os.environ.get("TAS_REMOVAL_FOLLOWS") == "1"
# Run after every other module, in this order: the one that may end with the install changed,
# then the RBAC check, which reads what all the others made the extender ask for.
LAST = ("test_load_aware.py", "test_rbac_used.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # stable: every other module keeps its order, first
    items.sort(key=lambda item: LAST.index(item.path.name) + 1 if item.path.name in LAST else 0)


# A node's own directories, as realnode.sh bind-mounts them from nodes/<node>/fs/.
NODE_DIRS = {"/etc/kubernetes": "etc-kubernetes", "/etc/tas": "etc-tas",
             "/var/lib/node-exporter": "var-lib-node-exporter", "/var/log/kubernetes": "var-log-kubernetes"}


def node_path(node: str, path: str) -> pathlib.Path:
    """Where a path of one node's own directories (/etc/tas, /tmp ...) is seen from this machine."""
    for root, flat in NODE_DIRS.items():
        if path == root or path.startswith(root + "/"):
            return REAL_CLUSTER_DIR / "nodes" / node / "fs" / flat / path[len(root):].lstrip("/")
    raise ValueError(f"{path} is not in one of a node's own directories {sorted(NODE_DIRS)}")


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    return ready_kubeconfig(str(REAL_CLUSTER_DIR / "kubeconfig"), "make demo")


def run_ansible(program: str, *args: str, succeed: bool = True, inventory: str = "real") -> subprocess.CompletedProcess:
    """Run ansible-playbook or ansible against the real-node cluster's inventory (inventory/real,
    as make demo does, or another under inventory/); its output read as plain text (molecule
    forces colours in its environment). Asserts that it succeeded, unless succeed is False."""
    env = dict(os.environ, KUBECONFIG=str(REAL_CLUSTER_DIR / "kubeconfig"),
               PATH=f"{REAL_CLUSTER_DIR / 'bin'}:{pathlib.Path(sys.executable).parent}:{os.environ['PATH']}",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    result = subprocess.run([str(pathlib.Path(sys.executable).with_name(program)),
                             "-i", str(REPO / "inventory" / inventory), *args],
                            cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if succeed:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return result


def kubectl(*args: str) -> None:
    """kubectl against the real-node cluster (apply and delete of a manifest, as a user would)."""
    subprocess.run([str(REAL_CLUSTER_DIR / "bin" / "kubectl"), "--kubeconfig", str(REAL_CLUSTER_DIR / "kubeconfig"),
                    *args], check=True, capture_output=True, text=True)


def ansible_playbook(*args: str, succeed: bool = True, inventory: str = "real") -> subprocess.CompletedProcess:
    """Run a playbook against the real-node cluster, as make demo does."""
    return run_ansible("ansible-playbook", *args, succeed=succeed, inventory=inventory)
