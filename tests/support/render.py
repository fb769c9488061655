"""What Ansible itself renders from a role: an expression evaluated with the role's defaults and
vars (and `role_dir` pointing at it), by `ansible-playbook` on localhost, with no cluster; and the
collection's filters, for templates rendered with Jinja alone."""

from __future__ import annotations

import importlib.util
import pathlib
import tempfile

import yaml

from .paths import REPO
from .playbook import run_playbooks

COLLECTION = REPO / "collections/ansible_collections/intel/tas"


def rendered(role: pathlib.Path, expression: str, values: dict):
    """The value of `expression` (a Jinja template) with the role's variables and `values` over them."""
    return rendered_each([(role, expression, values)])[0]


def rendered_each(renders: list[tuple[pathlib.Path, str, dict]]) -> list:
    """The value of each (role, expression, values), as rendered() gives it, from one ansible-playbook
    run (its start-up takes seconds). Each playbook lies beside a link to its role's templates, where
    a template's lookups of the role's other templates (lookup('ansible.builtin.template', 'x.j2'))
    find them, as they do in the role."""
    with tempfile.TemporaryDirectory() as scratch:
        playbooks = []
        for index, (role, expression, values) in enumerate(renders):
            directory = pathlib.Path(scratch) / str(index)
            directory.mkdir()
            (directory / "templates").symlink_to(role / "templates")
            play = [{
                "hosts": "localhost", "connection": "local", "gather_facts": False,
                "vars_files": [str(role / "defaults/main.yml"), str(role / "vars/main.yml")],
                "vars": {"role_dir": str(role)},
                # task vars: over the role's defaults and vars, as extra vars would be
                "tasks": [{"name": "Render", "vars": values, "ansible.builtin.debug": {"msg": expression}}],
            }]
            (directory / "render.yml").write_text(yaml.safe_dump(play))
            playbooks.append(str(directory / "render.yml"))
        run, plays = run_playbooks(playbooks, "-i", "localhost,")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return [play["tasks"][0]["hosts"]["localhost"]["msg"] for play in plays]


def collection_filters() -> dict:
    """Every filter of the collection's filter plugins, by the name templates call it (intel.tas.<name>)."""
    filters = {}
    for path in sorted((COLLECTION / "plugins" / "filter").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"intel_tas_filter_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        filters.update({f"intel.tas.{name}": filter_ for name, filter_ in module.FilterModule().filters().items()})
    return filters
