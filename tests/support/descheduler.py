"""The descheduler role's templates rendered as Ansible renders them (Jinja with the plugins they
use, the collection's filters among them), for the unit tests of what they hold and the
integration test that the real descheduler accepts them."""

from __future__ import annotations

import json

import jinja2
import yaml
from ansible.plugins.filter.core import to_bool
from ansible.plugins.test.core import version_compare

from .paths import REPO
from .render import collection_filters

ROLE = REPO / "collections/ansible_collections/intel/tas/roles/descheduler"
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())


def template_environment() -> jinja2.Environment:
    """Jinja as Ansible renders the role's templates, with the plugins they use."""
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    environment.tests["version"] = version_compare
    environment.filters.update(to_json=json.dumps, bool=to_bool)
    environment.filters.update(collection_filters())
    return environment


def policy(version: str, **overrides) -> dict:
    environment = template_environment()
    api = "descheduler/v1alpha2" if version_compare(version, "0.27.0", ">=") else "descheduler/v1alpha1"
    variables = {**DEFAULTS, **overrides, "ansible_managed": "managed", "__descheduler_version": version,
                 "__descheduler_policy_api": api}
    text = environment.from_string((ROLE / "templates/policy.yaml.j2").read_text()).render(variables)
    return yaml.safe_load(text)
