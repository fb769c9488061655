"""intel.tas.adapter_config_with / adapter_config_without: the owner's configuration kept byte for byte."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.intel.tas.plugins.filter.adapter_config import (
    BEGIN, END, adapter_config_with, adapter_config_without)

OURS = [{"seriesQuery": '{__name__=~"^node_.*",node!=""}', "resources": {"overrides": {"node": {"resource": "node"}}},
         "name": {"matches": "^node_(.*)"}, "metricsQuery": "max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"}]

# As TAS's documentation sets the adapter up: comments, quoting and order its owner chose.
THEIRS = """\
# custom metrics for the HPA (platform team)
rules:
  # every metric with a node label
  - seriesQuery: '{__name__=~"^health_.*",instance!=""}'
    resources:
      overrides:
        instance: {resource: node}
    name: {matches: "^(.*)"}
    metricsQuery: 'avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
externalRules:
  - seriesQuery: '{__name__="queue_depth"}'
    metricsQuery: sum(<<.Series>>)
"""

CONFIGS = {
    "indented list, other keys after": THEIRS,
    "list at the key's indentation": "rules:\n- seriesQuery: up\n  metricsQuery: up\n",
    "empty flow list": "rules: []\nresourceRules: {}\n",
    "no rules key": "externalRules:\n- seriesQuery: up\n",
    "empty file": "",
    "no final newline": "rules:\n  - seriesQuery: up\n    metricsQuery: up",
}


@pytest.mark.parametrize("text", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_rules_go_first_and_everything_else_is_kept(text):
    merged = adapter_config_with(text, OURS)
    before = yaml.safe_load(text) or {}
    after = yaml.safe_load(merged)
    assert after["rules"] == OURS + (before.get("rules") or [])
    assert {k: v for k, v in after.items() if k != "rules"} == {k: v for k, v in before.items() if k != "rules"}
    assert BEGIN in merged and END in merged


@pytest.mark.parametrize("text", [CONFIGS["indented list, other keys after"], CONFIGS["list at the key's indentation"]])
def test_removal_gives_back_the_owners_text_byte_for_byte(text):
    assert adapter_config_without(adapter_config_with(text, OURS)) == text


def test_adding_again_replaces_the_block_and_changes_nothing():
    once = adapter_config_with(THEIRS, OURS)
    assert adapter_config_with(once, OURS) == once
    changed = [dict(OURS[0], metricsQuery="min(<<.Series>>) by (<<.GroupBy>>)")]
    assert yaml.safe_load(adapter_config_with(once, changed))["rules"][0] == changed[0]
    assert once.count(BEGIN) == 1


def test_a_configuration_without_the_block_is_returned_as_it_is():
    assert adapter_config_without(THEIRS) == THEIRS


@pytest.mark.parametrize("text, message", [
    ("rules: [{seriesQuery: up}]\n", "flow style"),
    ("- a list\n", "not a prometheus-adapter configuration"),
    ("rules: {a: 1}\n", "'rules' is not a list"),
    ("rules: [\n", "not YAML"),
])
def test_what_cannot_be_merged_is_refused_with_the_reason(text, message):
    with pytest.raises(AnsibleFilterError, match=message):
        adapter_config_with(text, OURS)
