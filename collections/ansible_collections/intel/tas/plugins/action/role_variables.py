# -*- coding: utf-8 -*-
# Copyright: Telemetry-aware scheduling maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Fail on a variable named like the calling role's but unknown to its argument spec."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import os

import yaml

from ansible.plugins.action import ActionBase


def unknown_variables(names, prefix, known, other_prefixes):
    """Names that start with prefix, are not known and belong to no other role, sorted."""
    return sorted(
        name for name in names
        if name.startswith(prefix) and name not in known
        and not any(name.startswith(other) for other in other_prefixes)
    )


# Variables the collection took away, with what took their place: named instead of the closest
# known name, which would point elsewhere (descheduler_extended_resource is not descheduler_resources).
REPLACED = {
    "descheduler_extended_resource": "tas_extended_resource",
    "descheduler_extended_resource_quantity": "extender_extended_resource_quantity",
    "descheduler_advertise_extended_resource": "extender_advertise_extended_resource",
    "descheduler_kubectl": "extender_kubectl",
    "scheduler_config_managed_resource": "tas_extended_resource",
}


def describe(name, known):
    if name in REPLACED:
        return "%s (replaced by %s)" % (name, REPLACED[name])
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return "%s (did you mean %s?)" % (name, close[0]) if close else "%s (no known variable is close)" % name


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset()

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        role = self._task._role
        if role is None:
            result.update(failed=True, msg="intel.tas.role_variables runs only inside a role")
            return result
        role_path = role._role_path
        with open(os.path.join(role_path, "meta", "argument_specs.yml")) as spec:
            known = set(yaml.safe_load(spec)["argument_specs"]["main"]["options"])
        prefix = os.path.basename(role_path) + "_"
        # prometheus_ must not claim prometheus_adapter_'s variables.
        roles_dir = os.path.dirname(role_path)
        others = [name + "_" for name in os.listdir(roles_dir)
                  if (name + "_").startswith(prefix) and name + "_" != prefix]
        unknown = unknown_variables((task_vars or {}).keys(), prefix, known, others)
        result.update(changed=False, unknown=unknown)
        if unknown:
            result.update(failed=True, msg=(
                "Unknown variable%s for role %s: %s. Rename or remove %s; the role's variables are listed "
                "in its meta/argument_specs.yml." % (
                    "s" if len(unknown) > 1 else "", os.path.basename(role_path),
                    ", ".join(describe(name, known) for name in unknown), "them" if len(unknown) > 1 else "it")))
        return result
