# -*- coding: utf-8 -*-
# Copyright: Telemetry-aware scheduling maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Add this collection's rules to a prometheus-adapter configuration someone else owns, and take
them out again, leaving every other byte of it as it was (comments, order, quoting).

The rules go in as one block between two marker comments at the top of the `rules:` list:

    rules:
    # BEGIN intel.tas rules: telemetry-aware scheduling (removed by tas_state=absent)
    - seriesQuery: ...
    # END intel.tas rules
    - seriesQuery: ...   (the owner's rules, untouched)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

import yaml
from ansible.errors import AnsibleFilterError

BEGIN = "# BEGIN intel.tas rules: telemetry-aware scheduling (removed by tas_state=absent)"
END = "# END intel.tas rules"
_BLOCK = re.compile(r"^[ \t]*" + re.escape(BEGIN) + r"\n(?:.*\n)*?[ \t]*" + re.escape(END) + r"\n", re.M)
_RULES_KEY = re.compile(r"^rules:[ \t]*(?:#.*)?$", re.M)
_EMPTY_RULES = re.compile(r"^rules:[ \t]*(?:\[\s*\]|null|~)?[ \t]*(?:#.*)?$", re.M)


def _load(text: str, what: str) -> dict:
    try:
        config = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as error:
        raise AnsibleFilterError(f"{what} is not YAML: {error}") from error
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise AnsibleFilterError(f"{what} is not a prometheus-adapter configuration (a mapping): {text[:80]!r}")
    rules = config.get("rules") or []
    if not isinstance(rules, list):
        raise AnsibleFilterError(f"{what}: 'rules' is not a list")
    return config


def adapter_config_without(text: str) -> str:
    """The configuration with this collection's block taken out (unchanged when it has none)."""
    return _BLOCK.sub("", text)


def adapter_config_with(text: str, rules: list) -> str:
    """The configuration with `rules` as this collection's block, any earlier block replaced."""
    if not isinstance(rules, list) or not rules:
        raise AnsibleFilterError("adapter_config_with needs a non-empty list of rules")
    theirs = adapter_config_without(text)
    before = _load(theirs, "the adapter's configuration")
    if theirs and not theirs.endswith("\n"):
        theirs += "\n"
    empty = _EMPTY_RULES.search(theirs)
    key = _RULES_KEY.search(theirs)
    if "rules" not in before:
        prefix, indent, suffix = theirs + "rules:\n", "", ""
    elif empty and not (before.get("rules") or []):
        prefix, indent, suffix = theirs[:empty.start()] + "rules:\n", "", theirs[empty.end() + 1:]
    elif key:
        # the owner's first item gives the list's indentation
        rest = theirs[key.end() + 1:]
        first = re.search(r"^([ \t]*)- ", rest, re.M)
        indent = first.group(1) if first else ""
        prefix, suffix = theirs[:key.end() + 1], rest
    else:
        raise AnsibleFilterError(
            "the adapter's configuration writes 'rules' in flow style ([...]) or not at the top "
            "level: rewrite it as a block list ('rules:' and one '- seriesQuery: ...' per rule)")
    # plain lists, dicts and strings: what Ansible passes in may be its own subclasses
    rules = json.loads(json.dumps(rules))
    body = yaml.safe_dump(rules, default_flow_style=False, sort_keys=False, width=1000)
    block = "".join(f"{indent}{line}\n" for line in [BEGIN, *body.splitlines(), END])
    merged = prefix + block + suffix
    after = _load(merged, "the merged configuration")
    expected = dict(before, rules=list(rules) + list(before.get("rules") or []))
    if after != expected:
        raise AnsibleFilterError(
            "adding the rules would change more of the adapter's configuration than its rules "
            "list; check its indentation (the rules were not added)")
    return merged


class FilterModule:
    def filters(self):
        return {"adapter_config_with": adapter_config_with, "adapter_config_without": adapter_config_without}
