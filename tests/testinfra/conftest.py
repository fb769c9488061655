"""testinfra checks of hosts provisioned by playbooks/site.yml (run by molecule's verify)."""

from __future__ import annotations

import pytest


@pytest.fixture
def var(host):
    """An inventory variable of the host under test, rendered by Ansible."""
    def get(name: str, default: str | None = None):
        value = host.ansible("ansible.builtin.debug", f"var={name}", check=False)[name]
        if isinstance(value, str) and ("is undefined" in value or value.startswith("VARIABLE IS NOT DEFINED")):
            assert default is not None, f"{name} is not defined for {host.backend.get_pytest_id()}"
            return default
        return value
    return get
