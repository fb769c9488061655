#!/usr/bin/env python3
"""The real-node cluster's inventory (roles/real_cluster), read from the description the role
writes at `up` (cluster.json in its state directory): control planes and workers as Ansible
reaches them, over SSH as the cluster's admin user, who becomes root with sudo, as a platform
team's inventory has it. No collection setting is overridden here: the roles' defaults run,
as on any kubeadm cluster (group_vars/ says what differs). Before the cluster is up the
inventory is empty.

The state directory is $TAS_REAL_CLUSTER_DIR, else ~/.local/state/tas-real-cluster.
"""

import json
import os
import sys
from pathlib import Path


def state_dir() -> Path:
    default = Path.home() / ".local" / "state" / "tas-real-cluster"
    return Path(os.environ.get("TAS_REAL_CLUSTER_DIR") or default)


def inventory(description: dict) -> dict:
    ssh = description["ssh"]
    hostvars = {}
    for node in description["nodes"]:
        hostvars[node["name"]] = {"ansible_host": node["address"]}
        if node["control_plane"]:
            hostvars[node["name"]]["ansible_python_interpreter"] = description["control_plane_python"]
    return {
        "all": {
            "vars": {
                "ansible_connection": "ssh",
                "ansible_user": ssh["user"],
                "ansible_ssh_private_key_file": ssh["key"],
                "ansible_ssh_common_args": f"-o UserKnownHostsFile={ssh['known_hosts']}",
                # the nodes' host keys are pinned in known_hosts: check them
                "ansible_host_key_checking": True,
                "ansible_python_interpreter": "/usr/bin/python3",
                # this machine's address on the nodes' LAN (the API endpoint's), for group_vars/
                "real_cluster_admin_address": description["api_endpoint"].rsplit(":", 1)[0],
            },
            "children": ["control_plane", "tas_nodes"],
        },
        "control_plane": {"hosts": [n["name"] for n in description["nodes"] if n["control_plane"]]},
        "tas_nodes": {"hosts": [n["name"] for n in description["nodes"] if not n["control_plane"]]},
        "_meta": {"hostvars": hostvars},
    }


def main() -> int:
    path = state_dir() / "cluster.json"
    description = json.loads(path.read_text()) if path.is_file() else None
    if "--host" in sys.argv:
        print("{}")
        return 0
    empty = {"_meta": {"hostvars": {}}, "control_plane": {"hosts": []}, "tas_nodes": {"hosts": []}}
    print(json.dumps(inventory(description) if description else empty, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
