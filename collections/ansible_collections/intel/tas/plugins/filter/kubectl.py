# -*- coding: utf-8 -*-
# Copyright: Telemetry-aware scheduling maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Run kubectl against the cluster kubernetes.core's modules talk to, from the same task.

The modules read K8S_AUTH_KUBECONFIG and K8S_AUTH_CONTEXT from the environment they run in (the
managed host's, with the play's `environment:`), else kubectl's own defaults ($KUBECONFIG, else
~/.kube/config, its current context); kubectl reads neither variable. The command line is
therefore wrapped in a shell that reads them where kubectl runs, at the time it runs:

    argv: "{{ [namespace_kubectl, 'get', 'pods'] | intel.tas.kubectl_argv }}"
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# $0 is kubectl, "$@" its arguments. K8S_AUTH_KUBECONFIG may list several files (":"), as
# KUBECONFIG does, which takes them the same way; --kubeconfig would take one.
SCRIPT = (
    '[ -z "${K8S_AUTH_KUBECONFIG:-}" ] || export KUBECONFIG="$K8S_AUTH_KUBECONFIG"; '
    '[ -z "${K8S_AUTH_CONTEXT:-}" ] || set -- --context="$K8S_AUTH_CONTEXT" "$@"; '
    'exec "$0" "$@"'
)


def kubectl_argv(argv):
    """argv (kubectl, then its arguments) run with the modules' kubeconfig and context."""
    if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(arg, str) for arg in argv):
        raise AnsibleFilterError("kubectl_argv needs a list of strings, kubectl first: got %r" % (argv,))
    return ["/bin/sh", "-c", SCRIPT] + list(argv)


class FilterModule:
    def filters(self):
        return {"kubectl_argv": kubectl_argv}
