# -*- coding: utf-8 -*-
# Copyright: Telemetry-aware scheduling maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Fail on a variable named like the calling role's but unknown to its argument spec.

A variable that another installed role declares is that role's, not a typo: prometheus.prometheus
has roles named node_exporter and prometheus too, and a play that runs both collections sets
node_exporter_version for theirs. Such names are looked up only when they would fail the play.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import glob
import os

import yaml

from ansible import constants as C
from ansible.plugins.action import ActionBase
from ansible.utils.collection_loader import AnsibleCollectionConfig


def unknown_variables(names, prefix, known, other_prefixes):
    """Names that start with prefix, are not known and belong to no other role, sorted."""
    return sorted(
        name for name in names
        if name.startswith(prefix) and name not in known
        and not any(name.startswith(other) for other in other_prefixes)
    )


def _options(role_dir):
    """Every variable a role declares: its argument specs' options (all entry points) and the
    names in its defaults."""
    names = set()
    try:
        with open(os.path.join(role_dir, "meta", "argument_specs.yml")) as spec:
            for entry in ((yaml.safe_load(spec) or {}).get("argument_specs") or {}).values():
                names.update((entry or {}).get("options") or {})
    except (OSError, yaml.YAMLError, AttributeError):
        pass
    defaults = [os.path.join(role_dir, "defaults", "main.yml")]
    defaults += sorted(glob.glob(os.path.join(role_dir, "defaults", "main", "*.yml")))
    for path in defaults:
        try:
            with open(path) as values:
                content = yaml.safe_load(values)
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(content, dict):
            names.update(content)
    return names


def other_roles_declaring(name, own_role_dir, collection_paths, roles_paths):
    """The installed roles, other than the calling one, whose name is a prefix of `name` (the
    naming rule of role variables) and which declare it, as namespace.collection.role or role."""
    parts = name.split("_")
    candidates = ["_".join(parts[:n]) for n in range(1, len(parts))]
    own = os.path.realpath(own_role_dir)
    own_collection = own.split(os.sep)[-4:-2]  # .../ansible_collections/<namespace>/<name>/roles/<role>
    found = []
    for base in collection_paths:
        for role in candidates:
            for role_dir in sorted(glob.glob(os.path.join(base, "ansible_collections", "*", "*", "roles", role))):
                collection = role_dir.split(os.sep)[-4:-2]
                # another copy of this collection (another version installed elsewhere) is not another role
                if collection != own_collection and name in _options(role_dir):
                    found.append("%s.%s.%s" % (collection[0], collection[1], role))
    for base in roles_paths:
        for role in candidates:
            for role_dir in sorted(glob.glob(os.path.join(base, role)) + glob.glob(os.path.join(base, "*." + role))):
                if os.path.realpath(role_dir) != own and name in _options(role_dir):
                    found.append(os.path.basename(role_dir))
    return sorted(set(found))


def describe(name, known):
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
        theirs = {}
        for name in unknown:
            roles = other_roles_declaring(name, role_path, AnsibleCollectionConfig.collection_paths,
                                          C.DEFAULT_ROLES_PATH or [])
            if roles:
                theirs[name] = roles
        unknown = [name for name in unknown if name not in theirs]
        # Left to the roles that declare them, shown with -v.
        result.update(changed=False, unknown=unknown, other_roles=theirs)
        if unknown:
            result.update(failed=True, msg=(
                "Unknown variable%s for role %s: %s. Rename or remove %s; the role's variables are listed "
                "in its meta/argument_specs.yml." % (
                    "s" if len(unknown) > 1 else "", os.path.basename(role_path),
                    ", ".join(describe(name, known) for name in unknown), "them" if len(unknown) > 1 else "it")))
        return result
