"""The real descheduler (the KWOK cluster's binary, v0.36.0) reads each policy the role writes and
accepts it: it gets past loading and validating the policy to where it calls the API server,
which here is an address nothing listens on. A policy it would refuse stops it before that, with
its reason, as the last case shows. The unit tests (tests/unit/collection/test_descheduler_policy.py)
say what the policies hold; this says the descheduler agrees with them."""

from __future__ import annotations

import pathlib
import subprocess

import pytest
import yaml

from support import DEFAULT_CLUSTER_DIR, free_port
from support.descheduler import policy  # the unit tests' rendering of the template

DESCHEDULER = DEFAULT_CLUSTER_DIR / "bin" / "descheduler"
UNREACHABLE = "https://127.0.0.1:1"


def run(tmp_path: pathlib.Path, rendered: dict) -> str:
    if not DESCHEDULER.exists():
        pytest.fail(f"{DESCHEDULER} not found: `make cluster` builds and installs it")
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(rendered))
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": UNREACHABLE}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "none"}}]}))
    result = subprocess.run([str(DESCHEDULER), f"--policy-config-file={tmp_path / 'policy.yaml'}",
                             f"--kubeconfig={tmp_path / 'kubeconfig'}", f"--secure-port={free_port()}"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0, result.stderr[-2000:]  # it cannot reach the API server
    return result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("overrides", [
    {},
    {"descheduler_namespaces_include": ["shop"]},
    {"descheduler_rebalance_by_load": True, "descheduler_namespaces_exclude": ["batch"]},
], ids=["defaults", "namespace scope", "rebalance by load"])
def test_the_descheduler_accepts_the_policy_and_goes_on_to_the_api_server(tmp_path, overrides):
    last = run(tmp_path, policy("0.36.0", **overrides))
    assert "127.0.0.1:1" in last and "connection refused" in last, last


def test_a_policy_it_refuses_stops_it_before_the_api_server_with_the_reason(tmp_path):
    rendered = policy("0.36.0", descheduler_rebalance_by_load=True)
    profile = next(p for p in rendered["profiles"] if p["name"] == "telemetry-aware-scheduling-load")
    next(c for c in profile["pluginConfig"] if c["name"] == "LowNodeUtilization")["args"]["thresholds"] = {"cpu": 30}
    last = run(tmp_path, rendered)
    assert "thresholds and targetThresholds configured different resources" in last, last
