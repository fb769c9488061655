"""The extender's packages import only from their own layer's package or a layer below.

decide is the bottom; serve, cluster, certs, sources and offline build on decide and not on each
other; cli wires everything. Every import counts, including those inside functions and under
TYPE_CHECKING, since each still ties one package to another.

And there is one road to a decision: the entry points (serve, evaluate, explain) all ask
decide.decision.Decider, and none of them reaches a strategy itself.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[3] / "extender_app" / "tas_extender"

# package -> what it may import besides itself (the package's root, tas_extender/__init__.py, is open to all)
ALLOWED = {
    "decide": set(),
    "serve": {"decide"},
    "cluster": {"decide"},
    "certs": {"decide"},
    "sources": {"decide"},
    "offline": {"decide"},
    "cli": {"decide", "serve", "cluster", "certs", "sources", "offline"},
}


def package_of(module: str) -> str | None:
    """The sub-package a dotted module name falls in: `tas_extender.decide.wire` -> decide."""
    parts = module.split(".")
    if parts[0] != "tas_extender" or len(parts) < 2:
        return None
    return parts[1]


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    """Every tas_extender module a file imports, with the line it does so on."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                raise AssertionError(f"line {node.lineno}: relative import; write the absolute name")
            if node.module == "tas_extender":  # `from tas_extender import decide` names a package
                found += [(node.lineno, f"tas_extender.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name.split(".")[0] == "tas_extender"]


def violations(own: str, source: str) -> list[str]:
    """The imports of one module of package `own` that reach above or beside its layer."""
    out = []
    for line, name in imported(ast.parse(source)):
        target = package_of(name)
        if target is None or target == "__version__" or target == own:
            continue
        if target not in ALLOWED[own]:
            out.append(f"line {line}: {own} imports {name}")
    return out


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_sits_in_a_known_package():
    parts = [path.relative_to(PACKAGE).parts for path in MODULES]
    loose = ["/".join(p) for p in parts if (p[0] not in ALLOWED if len(p) > 1 else p[0] != "__init__.py")]
    assert not loose, f"modules outside the layered packages: {loose}"


@pytest.mark.parametrize("path", [p for p in MODULES if p.parent != PACKAGE],
                         ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_module_imports_nothing_above_or_beside_its_layer(path):
    own = path.relative_to(PACKAGE).parts[0]
    assert not violations(own, path.read_text()), violations(own, path.read_text())


@pytest.mark.parametrize("own, source", [
    ("decide", "from tas_extender.serve.api import create_app\n"),
    ("decide", "def f():\n    from tas_extender.cluster import controller\n"),
    ("serve", "from tas_extender import cluster\n"),
    ("cluster", "import tas_extender.certs.tls\n"),
    ("offline", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tas_extender.cli import main\n"),
], ids=["decide importing serve", "decide importing cluster inside a function", "serve importing its sibling",
        "cluster importing certs", "offline importing cli under TYPE_CHECKING"])
def test_an_import_from_above_or_beside_is_caught(own, source):
    assert violations(own, source)


@pytest.mark.parametrize("own, source", [
    ("serve", "from tas_extender.decide import wire\n"),
    ("cli", "from tas_extender.serve.api import create_app\n"),
    ("decide", "from tas_extender import __version__\nfrom tas_extender.decide.policy import Policy\n"),
], ids=["serve importing decide", "cli importing serve", "decide importing the root and itself"])
def test_an_import_from_below_or_within_passes(own, source):
    assert not violations(own, source)


ENTRY_POINTS = ("serve", "offline", "cli")
DECIDING_ENTRY_POINTS = ["serve/api.py", "offline/evaluate.py", "offline/explain.py"]


def names_imported(tree: ast.AST) -> set[str]:
    """Every dotted name a file imports, modules and the names taken from them."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


@pytest.mark.parametrize("path", [p for p in MODULES if p.relative_to(PACKAGE).parts[0] in ENTRY_POINTS],
                         ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_entry_point_reaches_a_strategy_itself(path):
    strategies = sorted(name for name in names_imported(ast.parse(path.read_text()))
                        if name.startswith("tas_extender.decide.strategies"))
    assert not strategies, f"decide through decision.Decider, not {strategies}"


@pytest.mark.parametrize("module", DECIDING_ENTRY_POINTS)
def test_every_entry_point_decides_through_the_decider(module):
    assert "tas_extender.decide.decision.Decider" in names_imported(ast.parse((PACKAGE / module).read_text()))
