"""The extender's package declares exactly what it imports, and the harness pins each in range."""

from __future__ import annotations

import ast
import importlib.metadata
import pathlib
import re
import sys
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = pathlib.Path(__file__).resolve().parents[3]
APP = REPO / "extender_app"
# uvicorn imports these itself when given their names: the extender names them, not imports them.
SERVER_OPTIONS = {"http", "loop"}
# uvicorn's modules that import a library of their own the extender relies on by subclassing them.
UVICORN_IMPLEMENTATIONS = {"uvicorn.protocols.http.httptools_impl": "httptools"}


def declared() -> dict[str, Requirement]:
    project = tomllib.loads((APP / "pyproject.toml").read_text())["project"]
    return {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}


def used_modules() -> set[str]:
    """Top-level modules tas_extender imports, and those it hands uvicorn by name."""
    found: set[str] = set()
    for path in (APP / "tas_extender").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
                if node.module in UVICORN_IMPLEMENTATIONS:
                    found.add(UVICORN_IMPLEMENTATIONS[node.module])
            elif isinstance(node, ast.keyword) and node.arg in SERVER_OPTIONS and isinstance(node.value, ast.Constant):
                found.add(node.value.value)
            elif isinstance(node, ast.Dict):
                found |= {v.value for k, v in zip(node.keys, node.values, strict=True)
                          if isinstance(k, ast.Constant) and k.value in SERVER_OPTIONS
                          and isinstance(v, ast.Constant) and isinstance(v.value, str)}
    return found - set(sys.stdlib_module_names) - {"tas_extender"}


def top_level_modules(distribution: str) -> set[str]:
    """The importable names an installed distribution provides (from its RECORD)."""
    files = importlib.metadata.distribution(distribution).files or []
    return {f.parts[0].split(".")[0] for f in files
            if len(f.parts) > 1 or f.suffix in (".py", ".so")} - {"__pycache__", ""}


def test_the_package_declares_every_module_it_imports_and_nothing_else():
    used = used_modules()
    provides = {name: top_level_modules(name) for name in declared()}
    unused = {name for name, modules in provides.items() if not modules & used}
    assert unused == set(), "declared in pyproject.toml but never imported by tas_extender"
    undeclared = used - set().union(*provides.values())
    assert undeclared == set(), "imported by tas_extender but declared in no dependency of pyproject.toml"


def test_constraints_pin_every_declared_dependency_within_its_range():
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if match := re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip()):
            pins[canonicalize_name(match[1])] = match[2]
    for name, requirement in declared().items():
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pins[name]), \
            f"constraints.txt pins {name}=={pins[name]}, outside the package's range {requirement.specifier}"
