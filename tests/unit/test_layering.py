"""The module layering of DESIGN.md, checked from the source: imports point
one way between packages, no import cycle inside broker/, and every typing-
only back-pointer (`if TYPE_CHECKING:`) says why in a comment."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"proto": "proto", "broker": "broker", "client": "client"}
PACKAGES["spark_connector"] = "spark_connector"
# Which of our packages each package may import (DESIGN "Module map").
ALLOWED = {
    "proto": set(),
    "broker": {"proto"},
    "client": {"proto"},
    "spark_connector": {"client", "proto"},
}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name.endswith("_pb2.py"):
                continue
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(["magnetar", package, *parts])] = path
    return found


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path) -> tuple[set[str], list[tuple[int, set[str]]]]:
    """(runtime imports of our modules, [(line, typing-only imports)])."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only_nodes: set[int] = set()
    blocks: list[tuple[int, list[ast.stmt]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            blocks.append((node.lineno, node.body))
            for inner in node.body:
                typing_only_nodes.update(id(n) for n in ast.walk(inner))

    def targets(node: ast.AST) -> set[str]:
        names: set[str] = set()
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:
                package = module.rsplit(".", node.level)[0]
                base = f"{package}.{base}"
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                names.add(candidate if candidate in MODULES else base)
        return {n for n in names if n.startswith("magnetar.")}

    runtime: set[str] = set()
    for node in ast.walk(tree):
        if id(node) not in typing_only_nodes:
            runtime |= targets(node)
    typing_only = [
        (line, set().union(*(targets(n) for stmt in body for n in ast.walk(stmt))))
        for line, body in blocks
    ]
    return runtime, typing_only


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _package(module: str) -> str:
    return module.split(".")[1]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_one_way(package: str) -> None:
    """DESIGN: proto imports nothing of ours; broker and client import proto
    and never each other; spark_connector imports client."""
    wrong = {
        f"{name} -> {target}"
        for name, (runtime, typing_only) in GRAPH.items()
        if _package(name) == package
        for target in runtime.union(*(t for _, t in typing_only))
        if _package(target) not in ALLOWED[package] | {package}
    }
    assert not wrong


def test_no_import_cycle_in_broker() -> None:
    """Runtime imports inside broker/ form no cycle (Tarjan's SCCs)."""
    nodes = [n for n in GRAPH if _package(n) == "broker"]
    edges = {
        n: sorted(t for t in GRAPH[n][0] if t in GRAPH and _package(t) == "broker" and t != n)
        for n in nodes
    }
    # Importing a submodule runs its package's __init__; that is no edge back.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in nodes:
        if node not in index:
            visit(node)
    assert cycles == []


def test_typing_only_back_pointers_say_why() -> None:
    """A `TYPE_CHECKING` import is a back-pointer from a lower module to a
    higher one; each carries a one-line reason in a comment on the line above."""
    unexplained = []
    for name, (_runtime, typing_only) in GRAPH.items():
        lines = MODULES[name].read_text().splitlines()
        for line, targets in typing_only:
            if not targets:
                continue
            above = lines[line - 2].strip() if line >= 2 else ""
            if not above.startswith("#"):
                unexplained.append(f"{name}:{line} -> {sorted(targets)}")
    assert unexplained == []


def test_connection_layer_is_typed_against_the_seam() -> None:
    """Issue 8: the connection layer, the service and the consumer name no
    concrete topic or subscription class and reach no cursor or dispatcher."""
    offenders = []
    for name in (
        "connection/cnx.py",
        "connection/producers.py",
        "connection/consumers.py",
        "service/broker_service.py",
        "topics/consumer.py",
    ):
        text = (ROOT / "broker" / name).read_text()
        for word in ("PersistentTopic", "PersistentSubscription", r"\.cursor", r"\.dispatcher"):
            if re.search(word + r"\b", text):
                offenders.append(f"{name}: {word}")
    assert offenders == []
