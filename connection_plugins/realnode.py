# Copyright: the telemetry-aware scheduling maintainers. Apache-2.0.
"""Connection to a node of the local real-node cluster (roles/real_cluster)."""

from __future__ import annotations

DOCUMENTATION = """
name: realnode
short_description: Run tasks inside a node of the local real-node cluster
description:
  - Each node of the harness's real-node cluster is a network, mount and UTS namespace of
    this machine with its own containerd and kubelet. This connection runs every command of
    a task in those namespaces with nsenter, so a play sees the node's own /etc/kubernetes,
    /var/lib/kubelet, /tmp, addresses and hostname, as it would on a separate machine.
  - Files are copied in and out through the same namespaces.
author: telemetry-aware scheduling maintainers
options:
  node:
    description:
      - Name of the node (its network namespace is tasrn-NODE); the host's name, or the
        delegated host's for a delegated task, as the ssh connection picks its host.
    vars:
      - name: inventory_hostname
      - name: ansible_host
      - name: delegated_vars['ansible_host']
  state_dir:
    description: The real-node cluster's state directory (real_cluster_dir).
    required: true
    vars:
      - name: realnode_state_dir
"""

import shlex
import subprocess

from ansible.errors import AnsibleError
from ansible.plugins.connection.local import Connection as LocalConnection


class Connection(LocalConnection):
    """The local connection, entered into one node's namespaces."""

    transport = "realnode"

    def _enter(self) -> list[str]:
        node, state = self.get_option("node"), self.get_option("state_dir")
        return ["nsenter", f"--net=/run/netns/tasrn-{node}", f"--mount={state}/ns/{node}.mnt",
                f"--uts={state}/ns/{node}.uts", "--"]

    def exec_command(self, cmd, in_data=None, sudoable=True):
        wrapped = f"{shlex.join(self._enter())} /bin/sh -c {shlex.quote(cmd)}"
        return super().exec_command(wrapped, in_data=in_data, sudoable=sudoable)

    def put_file(self, in_path, out_path):
        self._connect()
        with open(in_path, "rb") as source:
            result = subprocess.run([*self._enter(), "dd", f"of={out_path}", "bs=65536", "status=none"],
                                    stdin=source, capture_output=True, check=False)
        if result.returncode:
            raise AnsibleError(f"could not copy {in_path} to {out_path} on {self.get_option('node')}: "
                               f"{result.stderr.decode(errors='replace').strip()}")

    def fetch_file(self, in_path, out_path):
        self._connect()
        with open(out_path, "wb") as target:
            result = subprocess.run([*self._enter(), "dd", f"if={in_path}", "bs=65536", "status=none"],
                                    stdout=target, stderr=subprocess.PIPE, check=False)
        if result.returncode:
            raise AnsibleError(f"could not fetch {in_path} from {self.get_option('node')}: "
                               f"{result.stderr.decode(errors='replace').strip()}")
