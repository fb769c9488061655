"""intel.tas.kubectl_argv: kubectl reaches the cluster kubernetes.core's modules reach."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat
import subprocess

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.intel.tas.plugins.filter.kubectl import kubectl_argv

# A kubectl that says which kubeconfig it was given and its arguments, one per line.
FAKE_KUBECTL = '#!/bin/sh\necho "KUBECONFIG=${KUBECONFIG:-}"\nfor arg in "$@"; do echo "$arg"; done\n'
ARGS = ["patch", "node", "node-1", "-p", '[{"op": "add", "path": "/a b", "value": "$HOME"}]']


@pytest.fixture
def kubectl(tmp_path):
    path = tmp_path / "kubectl"
    path.write_text(FAKE_KUBECTL)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def run(kubectl, **env):
    clean = {name: value for name, value in os.environ.items() if not name.startswith(("K8S_AUTH_", "KUBECONFIG"))}
    return subprocess.run(kubectl_argv([kubectl] + ARGS), env={**clean, **env}, capture_output=True, text=True,
                          check=True).stdout.splitlines()


@pytest.mark.parametrize(("env", "expected"), [
    pytest.param({}, ["KUBECONFIG="] + ARGS, id="no K8S_AUTH_*: kubectl's own defaults, arguments as given"),
    pytest.param({"KUBECONFIG": "/home/u/.kube/a"}, ["KUBECONFIG=/home/u/.kube/a"] + ARGS,
                 id="KUBECONFIG alone: kept, as the modules' client reads it too"),
    pytest.param({"KUBECONFIG": "/home/u/.kube/a", "K8S_AUTH_KUBECONFIG": "/etc/tas/b:/etc/tas/c"},
                 ["KUBECONFIG=/etc/tas/b:/etc/tas/c"] + ARGS,
                 id="K8S_AUTH_KUBECONFIG wins over KUBECONFIG, several files merged alike"),
    pytest.param({"K8S_AUTH_CONTEXT": "prod admin"}, ["KUBECONFIG=", "--context=prod admin"] + ARGS,
                 id="K8S_AUTH_CONTEXT becomes --context"),
    pytest.param({"K8S_AUTH_KUBECONFIG": "", "K8S_AUTH_CONTEXT": ""}, ["KUBECONFIG="] + ARGS,
                 id="empty variables are unset ones, as for the modules"),
])
def test_kubectl_gets_the_modules_kubeconfig_and_context(kubectl, env, expected):
    assert run(kubectl, **env) == expected


@pytest.mark.parametrize("argv", [[], "kubectl get pods", ["kubectl", 3]])
def test_anything_but_a_list_of_strings_is_refused(argv):
    with pytest.raises(AnsibleFilterError):
        kubectl_argv(argv)
