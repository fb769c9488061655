"""The clusters the suites run against: the local cluster and the real-node cluster, read through
the Kubernetes API or the files they keep in their state directories."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import time
from importlib.metadata import version

import pytest

from .paths import REAL_CLUSTER_DIR

# The extender image the real-node cluster builds from the project's files, named after the
# installed package's version (the collection's extender_version equals it: tests/unit/collection).
EXTENDER_IMAGE = f"tas-extender:{version('tas-extender')}"


def real_cluster() -> dict:
    """The real-node cluster's description, as roles/real_cluster writes it at `up`: nodes
    (name, address, control_plane, pod_cidr), kubeconfig, state directory, SSH access."""
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


def served_health(api_client) -> dict[str, str]:
    """health_metric of each node as the custom metrics API serves it (what the extender reads)."""
    body = json.loads(get_raw(api_client, "/apis/custom.metrics.k8s.io/v1beta1/nodes/*/health_metric"))
    return {i["describedObject"]["name"]: i["value"] for i in body["items"]}


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
