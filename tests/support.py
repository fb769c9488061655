"""Helpers shared by the test suites (importable from any of them: tests/ is on sys.path) and the
benchmarks (`from tests.support import ...`, run from the repository's root)."""

from __future__ import annotations

import contextlib
import datetime
import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_CLUSTER_DIR = pathlib.Path.home() / ".local" / "state" / "tas-local-cluster"
REAL_CLUSTER_DIR = pathlib.Path(
    os.environ.get("TAS_REAL_CLUSTER_DIR", pathlib.Path.home() / ".local" / "state" / "tas-real-cluster")
)


def real_cluster() -> dict:
    """The real-node cluster's description, as roles/real_cluster writes it at `up`: nodes
    (name, address, control_plane, pod_cidr), kubeconfig, state directory, SSH access."""
    import json

    return json.loads((REAL_CLUSTER_DIR / "cluster.json").read_text())


def real_control_planes() -> list[str]:
    return [node["name"] for node in real_cluster()["nodes"] if node["control_plane"]]


def own_schedulers(pods: list[dict]) -> dict[str, tuple[str, int, datetime.datetime]]:
    """The cluster's own kube-scheduler on each control plane, from its pods as the API serves
    them: the pod's uid, its container's restarts and when that container started. A restart, a
    new pod or a changed manifest each change it."""
    found = {}
    for pod in pods:
        container = pod["status"]["containerStatuses"][0]
        found[pod["spec"]["nodeName"]] = (pod["metadata"]["uid"], container["restartCount"],
                                          datetime.datetime.fromisoformat(container["state"]["running"]["startedAt"]))
    return found


def running_own_schedulers(api_client) -> dict[str, tuple[str, int, datetime.datetime]]:
    from kubernetes import client

    pods = client.CoreV1Api(api_client).list_namespaced_pod("kube-system", label_selector="component=kube-scheduler")
    return own_schedulers(api_client.sanitize_for_serialization(pods)["items"])


def recorded_own_schedulers() -> dict[str, tuple[str, int, datetime.datetime]]:
    """As the realnode scenario recorded them before its managed install ($TAS_OWN_SCHEDULERS)."""
    import json

    return own_schedulers(json.loads(pathlib.Path(os.environ["TAS_OWN_SCHEDULERS"]).read_text()))


def write_simulated_loads(directories: dict[str, pathlib.Path], loads: dict[str, int] | None) -> None:
    """Each node's simulated CPU and memory use (percent) in load.prom of its textfile collector's
    directory, replaced whole as node-exporter may read it at any moment; None removes the file."""
    for node, directory in directories.items():
        path = directory / "load.prom"
        if loads is None:
            path.unlink(missing_ok=True)
            continue
        temporary = path.with_suffix(".tmp")
        temporary.write_text(f"simulated_cpu_usage_percent {loads[node]}\nsimulated_mem_usage_percent {loads[node]}\n")
        temporary.replace(path)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(condition: Callable[[], object], timeout: float, message: str | Callable[[], str],
             interval: float = 0.5):
    """Poll `condition` until it returns something truthy, or fail after `timeout` seconds.

    `message` says what was awaited; a callable is asked only on failure, so it can tell what the
    cluster showed last (the scores, the annotations) beside it.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = condition()
            if result:
                return result
        except Exception as error:  # noqa: BLE001 - keep polling, report the last error
            last_error = error
        time.sleep(interval)
    detail = f" (last error: {last_error})" if last_error else ""
    pytest.fail(f"timed out after {timeout:.0f}s: {message() if callable(message) else message}{detail}")


def record_figure(line: str) -> None:
    """Note a figure a test saw on the way (a time it waited, say) in the durations file that make
    test writes ($TAS_TEST_DURATIONS, build/test-durations.txt). Never asserted: timings belong
    in benchmarks, and a busy machine is slower."""
    path = os.environ.get("TAS_TEST_DURATIONS")
    if path:
        append_lines(path, [f"figure: {line}"])


def append_lines(path: str, lines: list[str]) -> None:
    """Add lines to a file that runs share (make test's failures and durations files)."""
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")


def get_raw(api, path: str) -> bytes:
    """GET a path of the API server (like `kubectl get --raw`) and return the body."""
    method, url, headers, body, _ = api.param_serialize(
        "GET", path, auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers, body=body, _request_timeout=10)
    response.read()
    if response.status != 200:
        raise RuntimeError(f"GET {path}: HTTP {response.status}: {response.data[:200]!r}")
    return response.data


def ready_kubeconfig(path: str, bring_up: str) -> str:
    """`path` if its API server answers /readyz; fails (never skips) naming what to run otherwise."""
    from kubernetes import config

    if not pathlib.Path(path).exists():
        pytest.fail(f"no kubeconfig at {path}: bring the cluster up first ({bring_up})")
    api = config.new_client_from_config(config_file=path)
    try:
        body = get_raw(api, "/readyz")
    except Exception as error:  # noqa: BLE001
        pytest.fail(f"the API server of {path} does not answer /readyz: {error}")
    finally:
        api.close()
    assert body.strip() == b"ok", body
    return path


def provisioned_extender(api) -> str | None:
    """The holder of the extender's leader lease if one renewed it in the last minute: the
    extender site.yml provisions runs, and would relabel the nodes the integration tests label."""
    from kubernetes import client

    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease("tas-extender", "telemetry-aware-scheduling")
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    spec = lease.spec
    if spec and spec.holder_identity and spec.renew_time and time.time() - spec.renew_time.timestamp() < 60:
        return str(spec.holder_identity)
    return None


def tas_extender_command() -> str:
    """The `tas-extender` console script installed beside the running Python."""
    return str(pathlib.Path(sys.executable).with_name("tas-extender"))


def start_extender(args: list[str], port: int, log_path: pathlib.Path) -> subprocess.Popen:
    """`tas-extender serve --unsafe` on 127.0.0.1:`port` with `args`, its output in `log_path`."""
    with log_path.open("w") as log:
        return subprocess.Popen(
            [tas_extender_command(), "serve", "--unsafe", "--host", "127.0.0.1", "--port", str(port), *args],
            stdout=log, stderr=subprocess.STDOUT)


def wait_ready(port: int, timeout: float, message: str = "extender ready") -> None:
    """Poll the /readyz of the extender `start_extender` started on `port` until it answers 200."""
    import httpx

    wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200, timeout, message)


@contextlib.contextmanager
def serving_extender(args: list[str], port: int, log_path: pathlib.Path, timeout: float = 30) -> Iterator[str]:
    """`start_extender`, then yield its base URL once it is ready; stops it afterwards."""
    proc = start_extender(args, port, log_path)
    try:
        wait_ready(port, timeout)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
