"""Helpers shared by the test suites (importable from any of them as `support`: tests/conftest.py
is the root conftest, so pytest puts tests/ on sys.path for every suite, whichever directory it
is given) and the benchmarks (`from tests.support import ...`, run from the repository's root).

By concern: paths (the repository, the fixtures, the clusters' state directories), waits
(wait_for, and the figures a run notes), cluster (the local and real-node clusters), extender
(a `tas-extender serve` process), asgi (the extender's app called in process), pki (the one
test PKI), incluster (the real-node in-cluster checks), controller (the integration tests of the
TASPolicy controller), descheduler (the descheduler role's templates rendered), load_aware (the
load-aware mode's annotations). Those are imported by module (`from support.incluster import
...`); the names below are importable from `support` itself, as they were when it was one module.
"""

from __future__ import annotations

from .cluster import (EXTENDER_IMAGE, get_raw, own_schedulers, provisioned_extender, ready_kubeconfig, real_cluster,
                      real_control_planes, recorded_own_schedulers, running_own_schedulers, served_health,
                      write_simulated_loads)
from .extender import free_port, serving_extender, start_extender, tas_extender_command, wait_ready
from .paths import DEFAULT_CLUSTER_DIR, FIXTURES, REAL_CLUSTER_DIR, REPO
from .waits import append_lines, record_figure, wait_for

__all__ = [
    "DEFAULT_CLUSTER_DIR", "EXTENDER_IMAGE", "FIXTURES", "REAL_CLUSTER_DIR", "REPO",
    "append_lines", "free_port", "get_raw", "own_schedulers", "provisioned_extender", "ready_kubeconfig",
    "real_cluster", "real_control_planes", "record_figure", "recorded_own_schedulers", "running_own_schedulers",
    "served_health", "serving_extender", "start_extender", "tas_extender_command", "wait_for", "wait_ready", "write_simulated_loads",
]
