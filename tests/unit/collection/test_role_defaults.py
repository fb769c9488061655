"""Role defaults that follow other settings render to what the roles that read them expect.

Each role's defaults/main.yml is rendered with Jinja and the collection's filters, as a play
would with the given extra vars, with no other role's defaults loaded (site.yml runs the
certificates role in a play of its own).
"""

from __future__ import annotations

import pathlib
import re
from importlib.metadata import version

import jinja2
import pytest
import yaml

from support.render import collection_filters

ROLES = pathlib.Path(__file__).resolve().parents[3] / "collections" / "ansible_collections" / "intel" / "tas" / "roles"
JINJA = jinja2.Environment(undefined=jinja2.StrictUndefined)
JINJA.filters.update(collection_filters())


def defaults(role: str) -> dict:
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())


def rendered(role: str, name: str, **extra_vars) -> object:
    """The value a play sees for a role's variable: an extra var wins, else the default rendered."""
    context = {**defaults(role), **extra_vars}
    value = context[name]
    while isinstance(value, str) and "{{" in value:
        value = JINJA.from_string(value).render(context).strip()
    return value


SCHEDULER_SECRET = defaults("scheduler_config")["scheduler_config_second_scheduler_client_secret"]


@pytest.mark.parametrize(("extra_vars", "expected"), [
    pytest.param({}, "", id="mode not set: no Secret, the key stays on the control planes"),
    pytest.param({"scheduler_config_mode": "kubeadm"}, "", id="kubeadm mode: no Secret"),
    pytest.param({"scheduler_config_mode": "service"}, "", id="service mode: no Secret"),
    pytest.param({"scheduler_config_mode": "second_scheduler"}, SCHEDULER_SECRET,
                 id="second_scheduler mode alone: the Secret the second scheduler mounts by default"),
    pytest.param({"scheduler_config_mode": "second_scheduler",
                  "scheduler_config_second_scheduler_client_secret": "my-scheduler-tls"}, "my-scheduler-tls",
                 id="second_scheduler mode with the scheduler's Secret renamed: that name"),
    pytest.param({"scheduler_config_mode": "second_scheduler", "certificates_scheduler_secret_name": "explicit"},
                 "explicit", id="an explicit name wins over the mode"),
])
def test_the_scheduler_secret_follows_the_scheduler_mode(extra_vars, expected):
    assert rendered("certificates", "certificates_scheduler_secret_name", **extra_vars) == expected


EXTENDER_VERSION = defaults("extender")["extender_version"]


def test_the_extenders_version_is_the_packages():
    """The collection installs the extender of extender_app/, whose version tas_extender holds
    (the installed package's version is tas_extender.__version__: extender_app/pyproject.toml)."""
    assert EXTENDER_VERSION == version("tas-extender")


@pytest.mark.parametrize(("name", "expected"), [
    ("extender_image", f"tas-extender:{EXTENDER_VERSION}"),
    ("extender_pip_spec", f"tas-extender=={EXTENDER_VERSION}"),
])
def test_the_extenders_image_and_package_follow_its_version(name, expected):
    assert rendered("extender", name) == expected
    assert rendered("extender", name, extender_version="9.8.7") == expected.replace(EXTENDER_VERSION, "9.8.7")


@pytest.mark.parametrize(("extra_vars", "expected"), [
    pytest.param({}, rendered("extender", "extender_image"),
                 id="nothing set: the extender role's default image, though its defaults are not loaded"),
    pytest.param({"extender_version": "0.4.0"}, "tas-extender:0.4.0", id="extender_version set: that version's image"),
    pytest.param({"extender_image": "registry.example.com/tas-extender:0.4.0"},
                 "registry.example.com/tas-extender:0.4.0", id="extender_image set (the README's recipe): that image"),
    pytest.param({"extender_image": "registry.example.com/tas-extender:0.4.0",
                  "certificates_renewal_image": "registry.example.com/renewal:1"},
                 "registry.example.com/renewal:1", id="an explicit renewal image wins"),
])
def test_the_renewal_runs_the_extenders_image(extra_vars, expected):
    assert rendered("certificates", "certificates_renewal_image", **extra_vars) == expected


@pytest.mark.parametrize(("extra_vars", "expected"), [
    pytest.param({}, "kube-system/tas-descheduler", id="the descheduler role's CronJob"),
    pytest.param({"descheduler_namespace": "descheduling"}, "descheduling/tas-descheduler",
                 id="in the descheduler's namespace"),
    pytest.param({"extender_descheduler_cron_job": ""}, "", id="empty: the schedule alone"),
])
def test_the_extender_starts_runs_of_the_descheduler_roles_cron_job(extra_vars, expected):
    assert rendered("extender", "extender_descheduler_cron_job", **extra_vars) == expected


def test_the_readmes_registry_recipe_builds_this_version():
    readme = (ROLES.parents[4] / "README.md").read_text()
    tags = re.findall(r"tas-extender:([0-9][^\s`]*)", readme)
    assert tags and set(tags) == {EXTENDER_VERSION}
