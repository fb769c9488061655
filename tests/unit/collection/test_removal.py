"""Removal (tas_state: absent) deletes every object a role's templates create.

Each role lists what it deletes by kind and name in tasks/absent*.yml, the task files they
import, or a list in vars/main.yml those tasks name (rendering the templates again would need
every variable the install computed); this keeps the lists and the templates in step. Namespaces are left to the namespace role, which deletes one only when nothing else is in it.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

ROLES = pathlib.Path(__file__).resolve().parents[3] / "collections" / "ansible_collections" / "intel" / "tas" / "roles"
TEMPLATES = {
    "certificates": ["renewal.yaml.j2"],
    "descheduler": ["cronjob.yaml.j2"],
    "extender": ["deployment.yaml.j2", "descheduler-runs.yaml.j2", "node-patch-policy.yaml.j2", "rbac.yaml.j2"],
    "node_exporter": ["daemonset.yaml.j2"],
    "prometheus": ["kubernetes.yaml.j2", "operator.yaml.j2"],
    "prometheus_adapter": ["apiservice.yaml.j2"],
    "scheduler_config": ["second-scheduler.yaml.j2"],
}


def created(role: str) -> set[tuple[str, str]]:
    """(kind, name) of every object in the role's templates, names as written (Jinja included)."""
    objects = set()
    for template in TEMPLATES[role]:
        for document in (ROLES / role / "templates" / template).read_text().split("\n---"):
            kind = re.search(r"^kind: (\S+)", document, re.M)
            name = re.search(r"^metadata:\n(?:  .*\n)*?  name: (.+)$", document, re.M)
            if kind and kind.group(1) != "Namespace":
                objects.add((kind.group(1), name.group(1).strip().strip('"')))
    return objects


def deleted(role: str) -> set[tuple[str, str]]:
    """(kind, name) of every object a kubernetes.core.k8s task of tasks/absent*.yml (or of a
    file it imports) deletes: listed in the task, or in the vars/main.yml list it names."""
    role_vars_path = ROLES / role / "vars" / "main.yml"
    role_vars = yaml.safe_load(role_vars_path.read_text()) if role_vars_path.exists() else {}

    def listed(text: str) -> list[dict]:
        return role_vars[re.fullmatch(r"\{\{ (\w+) \}\}", text).group(1)]

    tasks, files = [], sorted((ROLES / role / "tasks").glob("absent*.yml"))
    while files:
        path = files.pop(0)
        for task in yaml.safe_load(path.read_text()):
            tasks.append(task)
            if "ansible.builtin.import_tasks" in task:
                files.append(path.parent / task["ansible.builtin.import_tasks"])
    objects = set()
    for task in tasks:
        module = task.get("kubernetes.core.k8s")
        if not module or module.get("state") != "absent":
            continue
        if module.get("definition") == "{{ item }}":
            definitions = listed(task["loop"])
        elif isinstance(module.get("definition"), str):
            definitions = listed(module["definition"])
        else:
            definitions = module.get("definition") or [{"kind": module["kind"], "metadata": {"name": module["name"]}}]
        objects |= {(item["kind"], item["metadata"]["name"]) for item in definitions}
    return objects


@pytest.mark.parametrize("role", sorted(TEMPLATES))
def test_removal_deletes_every_object_the_templates_create(role):
    assert sorted(created(role) - deleted(role)) == []


@pytest.mark.parametrize("role", sorted(TEMPLATES))
def test_every_role_with_objects_removes_them_when_absent(role):
    main = (ROLES / role / "tasks" / "main.yml").read_text()
    assert "import_tasks: absent.yml" in main and "meta: end_role" in main
