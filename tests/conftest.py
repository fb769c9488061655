"""Fixtures shared by the test suites: the local cluster's kubeconfig and API clients."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from support import DEFAULT_CLUSTER_DIR, append_lines, ready_kubeconfig, wait_for


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    """Admin kubeconfig of the running local cluster; fails (never skips) when it is not up.
    The real-node suites override it with the real-node cluster's; api_client follows."""
    return ready_kubeconfig(os.environ.get("KUBECONFIG") or str(DEFAULT_CLUSTER_DIR / "kubeconfig"),
                            "make cluster")


@pytest.fixture(scope="session")
def api_client(kubeconfig: str) -> Iterator[object]:
    from kubernetes import config

    api = config.new_client_from_config(config_file=kubeconfig)
    yield api
    api.close()


@pytest.fixture
def namespace(api_client) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    name = f"tas-test-{os.getpid()}-{time.monotonic_ns() % 10**8}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # The API server refuses pods until the namespace's default ServiceAccount exists, which the
    # controller-manager creates just after the namespace: tests create pods at once.
    wait_for(lambda: core.read_namespaced_service_account("default", name), 60,
             f"the default ServiceAccount of namespace {name}")
    yield name
    core.delete_namespace(name)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Append this run's failures, one line each, to the file $TAS_TEST_FAILURES names (make test
    sets it and prints the file last): a long run's failures are then readable from its tail,
    however far up pytest's own report is, even when pytest ran inside a molecule step. The run's
    slowest tests go to $TAS_TEST_DURATIONS alike (molecule shows only pytest's last line)."""
    record_durations(terminalreporter, config)
    path = os.environ.get("TAS_TEST_FAILURES")
    failed = terminalreporter.stats.get("failed", []) + terminalreporter.stats.get("error", [])
    if not path or not failed:
        return
    lines = [f"pytest {' '.join(config.invocation_params.args)}: {len(failed)} failed"]
    for report in failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        reason = crash.message.splitlines()[0] if crash and crash.message else str(report.longrepr).splitlines()[-1]
        lines.append(f"  {report.nodeid} ({report.when}): {reason[:400]}")
    append_lines(path, lines)


def record_durations(terminalreporter, config, slowest: int = 12) -> None:
    path = os.environ.get("TAS_TEST_DURATIONS")
    if not path:
        return
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                seconds[report.nodeid] = seconds.get(report.nodeid, 0.0) + report.duration
    if not seconds:
        return
    lines = [f"pytest {' '.join(config.invocation_params.args)}: {sum(seconds.values()):.0f} s in {len(seconds)} tests"]
    ranked = sorted(seconds.items(), key=lambda item: -item[1])
    # the slowest few, and every test over 5 s: where a long run's time went
    for nodeid, spent in ranked[:slowest] + [item for item in ranked[slowest:] if item[1] > 5]:
        lines.append(f"  {spent:7.1f} s  {nodeid}")
    append_lines(path, lines)
