#!/usr/bin/env python3
"""Wait until every named node is Ready, restarting a kubelet that lost a race with itself.

    nodes-ready.py KUBECONFIG TIMEOUT RESTART_COMMAND NODE...

A kubelet gives up initialising its CSINode object if its own node is not registered within
its retries (about 20 s, which a TLS bootstrap on a busy 2-core host can take); it then stays
NotReady with "failed to initialize CSINode" until restarted. RESTART_COMMAND, with {node}
replaced, restarts that node's kubelet. Prints "restarted <node>" for each restart.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time

from kubernetes import client, config


def ready_condition(node: client.V1Node) -> client.V1NodeCondition | None:
    return next((c for c in node.status.conditions or [] if c.type == "Ready"), None)


def main(kubeconfig: str, timeout: str, restart: str, *names: str) -> int:
    api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    deadline, restarted, waiting = time.monotonic() + float(timeout), set(), {}
    while time.monotonic() < deadline:
        nodes = {n.metadata.name: n for n in api.list_node().items}
        waiting = {}
        for name in names:
            condition = ready_condition(nodes[name]) if name in nodes else None
            if condition is not None and condition.status == "True":
                continue
            waiting[name] = condition.message if condition else "not registered"
            if condition is not None and "CSINode" in (condition.message or "") and name not in restarted:
                subprocess.run(shlex.split(restart.replace("{node}", name)), check=True, capture_output=True)
                restarted.add(name)
                print(f"restarted {name}")
        if not waiting:
            return 0
        time.sleep(2)
    for name, message in waiting.items():
        print(f"{name} is not Ready after {timeout}s: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
