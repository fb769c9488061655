#!/usr/bin/env python3
"""The real-node cluster seen as a managed cluster: inventory/managed-example.yml as it is, with
the example's workers replaced by the cluster's workers (reached as inventory/real reaches
them). No control plane of the cluster is in it; Ansible reaches the API from this machine.
Before the cluster is up the inventory has no workers.
"""

import importlib.util
import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def _real():
    spec = importlib.util.spec_from_file_location("real_cluster_inventory", HERE.parent / "real" / "cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def admin_host(real_vars: dict) -> dict:
    """This machine, the cluster's admin host, let in by the extender's NetworkPolicy, as
    inventory/real's group_vars do: the tests ask each extender replica directly."""
    if "real_cluster_admin_address" not in real_vars:
        return {}
    return {"extender_network_policy_extra_from": [{"ipBlock": {"cidr": f"{real_vars['real_cluster_admin_address']}/32"}}]}


def inventory() -> dict:
    example = yaml.safe_load((HERE.parent / "managed-example.yml").read_text())["all"]
    real = _real()
    path = real.state_dir() / "cluster.json"
    description = json.loads(path.read_text()) if path.is_file() else None
    workers = real.inventory(description) if description else {"all": {"vars": {}}, "tas_nodes": {"hosts": []},
                                                               "_meta": {"hostvars": {}}}
    groups = example["children"]
    return {
        "all": {"vars": {**example["vars"], **admin_host(workers["all"]["vars"])}, "children": list(groups)},
        "control_plane": {"hosts": list(groups["control_plane"]["hosts"])},
        # the real cluster's way in (SSH as its admin user, its keys) instead of the example's
        "tas_nodes": {"hosts": workers["tas_nodes"]["hosts"], "vars": workers["all"]["vars"]},
        "_meta": {"hostvars": {**groups["control_plane"]["hosts"],
                               **{n: v for n, v in workers["_meta"]["hostvars"].items()
                                  if n in workers["tas_nodes"]["hosts"]}}},
    }


def main() -> int:
    print("{}" if "--host" in sys.argv else json.dumps(inventory(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
