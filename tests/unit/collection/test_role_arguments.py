"""Every role's defaults/main.yml and meta/argument_specs.yml describe the same variables."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

ROLES = pathlib.Path(__file__).resolve().parents[3] / "collections" / "ansible_collections" / "intel" / "tas" / "roles"
# Settings several roles share: one name, documented once in the collection's README.
COLLECTION_PREFIX = "tas_"


def role_names() -> list[str]:
    return sorted(path.name for path in ROLES.iterdir() if (path / "meta" / "argument_specs.yml").exists())


def load(role: str) -> tuple[dict, dict]:
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}
    options = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    return defaults, options


@pytest.mark.parametrize("role", role_names())
def test_every_default_is_documented_and_every_option_has_a_default(role):
    defaults, options = load(role)
    assert sorted(defaults) == sorted(options)


@pytest.mark.parametrize("role", role_names())
def test_argument_spec_defaults_equal_the_role_defaults(role):
    defaults, options = load(role)
    for name, spec in options.items():
        if "default" in spec:
            assert spec["default"] == defaults[name], name
        else:
            # Only values computed from other variables, or required ones, go without a default.
            assert spec.get("required") or "{{" in str(defaults[name]), f"{name} has no default in the spec"


@pytest.mark.parametrize("role", role_names())
def test_public_variables_carry_the_role_prefix_or_the_collection_prefix(role):
    defaults, _ = load(role)
    assert [name for name in defaults if not name.startswith((role + "_", COLLECTION_PREFIX))] == []


def test_a_collection_wide_variable_has_one_default_and_is_documented_once():
    readme = (ROLES.parent / "README.md").read_text()
    declared: dict[str, dict[str, object]] = {}
    for role in role_names():
        defaults, _ = load(role)
        for name, value in defaults.items():
            if name.startswith(COLLECTION_PREFIX):
                declared.setdefault(name, {})[role] = value
    assert declared, "no collection-wide variable found"
    for name, by_role in declared.items():
        assert len({repr(value) for value in by_role.values()}) == 1, f"{name} has different defaults: {by_role}"
        assert readme.count(f"| `{name}` |") == 1, f"{name} is not in the collection README's table"


JINJA = re.compile(r"{{.*?}}|{%.*?%}", re.DOTALL)
CONDITIONS = ("when", "that", "until", "changed_when", "failed_when")
# host_service is called with its variables (include_role vars), which is its interface.
CALLED_WITH_ARGUMENTS = {"host_service"}
# The certificates role issues what the second scheduler mounts and renews with the extender's
# image, and the extender starts runs of the descheduler's CronJob in the descheduler's namespace:
# each follows those roles' own switches, so that each is one setting, and reads nothing else of
# theirs (tests/unit/collection/test_role_defaults.py checks their fallbacks).
FOLLOWS = {"certificates": {"scheduler_config_mode", "scheduler_config_second_scheduler_client_secret",
                            "extender_image", "extender_version"},
           "extender": {"descheduler_namespace"}}


def _expressions(path: pathlib.Path) -> list[str]:
    """The Jinja a role file evaluates: templated strings and bare conditions."""
    text = path.read_text()
    found = JINJA.findall(text)
    if path.suffix == ".yml":
        def walk(node):
            if isinstance(node, dict):
                for key, value in node.items():
                    if key in CONDITIONS:
                        found.extend(value if isinstance(value, list) else [value])
                    walk(value)
            elif isinstance(node, list):
                for item in node:
                    walk(item)
        walk(yaml.safe_load(text))
    return [str(expression) for expression in found]


def _owner(variable: str, roles: list[str]) -> str | None:
    """The role a variable name belongs to (the longest matching prefix: prometheus_adapter_x)."""
    owners = [role for role in roles if variable.startswith(role + "_")]
    return max(owners, key=len) if owners else None


@pytest.mark.parametrize("role", role_names())
def test_a_role_reads_no_other_roles_variables(role):
    roles = role_names()
    foreign = set()
    for path in (ROLES / role).rglob("*"):
        if path.suffix not in (".yml", ".j2") or not path.is_file():
            continue
        for expression in _expressions(path):
            for variable in re.findall(r"\b[a-z][a-z0-9_]*\b", expression):
                owner = _owner(variable, roles)
                if (owner and owner != role and owner not in CALLED_WITH_ARGUMENTS
                        and variable not in FOLLOWS.get(role, set())):
                    foreign.add(f"{path.relative_to(ROLES)}: {variable}")
    assert sorted(foreign) == []
