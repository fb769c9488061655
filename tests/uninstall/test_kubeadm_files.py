"""After playbooks/uninstall.yml on the real-node cluster, every control plane's /etc/kubernetes is
as kubeadm wrote it, file by file and byte for byte (the scheduler manifest put back, the
scheduler configuration and the copy of the manifest gone), and the node directories the roles
wrote into hold nothing of ours.

The scenario's create step snapshots each control plane's /etc/kubernetes before site.yml runs
(file_hashes.py) and passes the snapshot's path in TAS_KUBEADM_FILES.
"""

from __future__ import annotations

import json
import os
import pathlib

from file_hashes import differences, hashes
import pytest
from support import REAL_CLUSTER_DIR, real_control_planes

NODES = REAL_CLUSTER_DIR / "nodes"


@pytest.mark.parametrize("node", real_control_planes())
def test_etc_kubernetes_is_as_kubeadm_wrote_it(node):
    snapshot = json.loads(pathlib.Path(os.environ["TAS_KUBEADM_FILES"]).read_text())
    directory = NODES / node / "fs" / "etc-kubernetes"
    before = snapshot.get(str(directory))
    assert before, f"the snapshot of kubeadm's files has nothing for {directory}"
    assert differences(before, hashes(directory)) == []


def test_no_certificate_or_metrics_file_is_left_on_any_node():
    # /etc/tas and /var/lib/node-exporter are mount points in the real-node cluster (each node's own
    # directory): they stay, empty.
    left = {str(path.relative_to(NODES)) for node in NODES.iterdir()
            for flat in ("etc-tas", "var-lib-node-exporter") for path in (node / "fs" / flat).rglob("*")}
    assert sorted(left) == []
