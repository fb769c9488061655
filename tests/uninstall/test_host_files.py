"""After playbooks/uninstall.yml on the KWOK cluster, where the roles ran everything as host
services under the cluster's supervisord: no program of ours is left, no file the roles wrote,
and kube-scheduler's configuration has no extender of ours (its other settings kept).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import yaml

from support import DEFAULT_CLUSTER_DIR

OUR_PROGRAMS = ("tas-extender", "prometheus-tas", "prometheus-adapter", "descheduler", "node-exporter-")


def test_no_supervised_program_of_ours():
    status = subprocess.run(
        [pathlib.Path(sys.executable).parent / "supervisorctl", "-c", DEFAULT_CLUSTER_DIR / "supervisord.conf", "status"],
        capture_output=True, text=True, check=False)
    programs = [line.split()[0] for line in status.stdout.splitlines() if line.strip()]
    assert "kube-scheduler" in programs, status.stdout + status.stderr
    assert [name for name in programs if name.startswith(OUR_PROGRAMS)] == []
    left = [path.name for path in (DEFAULT_CLUSTER_DIR / "supervisor.d").glob("*.conf") if path.stem.startswith(OUR_PROGRAMS)]
    assert left == []


def test_no_file_the_roles_wrote():
    written = ["tas-pki", "prometheus", "prometheus-adapter", "descheduler", "tas-extender.kubeconfig",
               "load-policy.yaml", "nodes/node-1/node-metrics", "nodes/node-2/node-metrics", "nodes/node-3/node-metrics"]
    assert [name for name in written if (DEFAULT_CLUSTER_DIR / name).exists()] == []


def test_the_scheduler_configuration_has_no_extender_of_ours():
    config = yaml.safe_load((DEFAULT_CLUSTER_DIR / "kube-scheduler" / "config.yaml").read_text())
    # What roles/local_cluster wrote, and nothing else.
    assert sorted(config) == ["apiVersion", "clientConnection", "kind", "leaderElection"], config
