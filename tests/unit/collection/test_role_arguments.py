"""Every role's defaults/main.yml and meta/argument_specs.yml describe the same variables."""

from __future__ import annotations

import pathlib

import pytest
import yaml

ROLES = pathlib.Path(__file__).resolve().parents[3] / "collections" / "ansible_collections" / "intel" / "tas" / "roles"


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
def test_public_variables_carry_the_role_prefix(role):
    defaults, _ = load(role)
    assert [name for name in defaults if not name.startswith(role + "_")] == []
