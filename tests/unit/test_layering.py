"""The module layering of DESIGN.md, checked from the source: imports point
one way between packages, no import cycle anywhere (typing-only imports
count), nothing above broker/topics/ reaches past the Topic, Subscription and
storage seams, and no module is over 600 lines."""

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


def _edges(typing_too: bool) -> dict[str, list[str]]:
    """Import edges between our modules; with `typing_too`, `if TYPE_CHECKING:`
    imports count as well (a cycle in the types is a cycle in the design)."""
    edges: dict[str, list[str]] = {}
    for name, (runtime, typing_only) in GRAPH.items():
        targets = set(runtime)
        if typing_too:
            targets = targets.union(*(t for _, t in typing_only))
        # Importing a submodule runs its package's __init__; that is no edge back.
        edges[name] = sorted(t for t in targets if t in GRAPH and t != name)
    return edges


def strongly_connected(edges: dict[str, list[str]]) -> list[list[str]]:
    """The components of more than one module (Tarjan), each sorted."""
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

    for node in edges:
        if node not in index:
            visit(node)
    return cycles


def test_cycle_finder_finds_a_cycle() -> None:
    """The check below can fail: a two-module and a three-module loop are found,
    a chain is not."""
    loops = {"a": ["b"], "b": ["a"], "c": ["d"], "d": ["e"], "e": ["c"], "f": ["a"]}
    assert strongly_connected(loops) == [["a", "b"], ["c", "d", "e"]]
    assert strongly_connected({"a": ["b"], "b": ["c"], "c": []}) == []


def test_no_import_cycle() -> None:
    """No import cycle in any package, typing-only imports included."""
    assert strongly_connected(_edges(typing_too=True)) == []


def test_typing_only_imports_say_why() -> None:
    """A `TYPE_CHECKING` import of one of our modules carries a one-line reason
    in a comment on the line above."""
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


# Above the seams: these packages see topics only as topics.base.Topic and
# Subscription, and storage only through storage.api.
ABOVE_THE_SEAMS = (
    "magnetar.broker.admin",
    "magnetar.broker.cluster",
    "magnetar.broker.connection",
    "magnetar.broker.observability",
    "magnetar.broker.policies",
    "magnetar.broker.service",
)
# Modules behind the seams, and the concrete classes they define.
BEHIND_THE_SEAMS = (
    "magnetar.broker.topics.persistent",
    "magnetar.broker.topics.non_persistent",
    "magnetar.broker.topics.subscription",
)
# The storage seam: the interfaces (api.py re-exports errors.py and
# metadata_api.py), and the storage's own metric families.
SEAM_MODULES = {
    "magnetar.broker.storage.api",
    "magnetar.broker.storage.errors",
    "magnetar.broker.storage.metadata_api",
    "magnetar.broker.storage.metrics",
}
CONCRETE = (
    "PersistentTopic",
    "NonPersistentTopic",
    "PersistentSubscription",
    "NonPersistentSubscription",
    "ManagedLedgerImpl",
    "ManagedCursorImpl",
)


def _reaches_past_a_seam(module: str, targets: set[str], text: str) -> list[str]:
    found = [
        f"{module} imports {t}"
        for t in sorted(targets)
        if t in BEHIND_THE_SEAMS
        or (t.startswith("magnetar.broker.storage.") and t not in SEAM_MODULES)
    ]
    found += [f"{module} names {w}" for w in CONCRETE if re.search(rf"\b{w}\b", text)]
    return found


def test_seam_check_catches_a_reach() -> None:
    """The check below can fail: an admin module importing the persistent topic,
    one naming ManagedLedgerImpl, and one importing a storage module are caught."""
    admin = "magnetar.broker.admin.x"
    assert _reaches_past_a_seam(admin, {"magnetar.broker.topics.persistent"}, "")
    assert _reaches_past_a_seam(admin, set(), "if isinstance(ml, ManagedLedgerImpl):")
    assert _reaches_past_a_seam(admin, {"magnetar.broker.storage.cursor"}, "")
    assert not _reaches_past_a_seam(admin, {"magnetar.broker.storage.api"}, "ManagedLedger")


def test_nothing_above_the_seams_names_a_concrete_class() -> None:
    """Issue 25: admin, metrics and stats, expiry and the policies, the
    connection layer, the service and the cluster are typed against Topic,
    Subscription, ManagedLedger and ManagedCursor only."""
    offenders = []
    for name, (runtime, typing_only) in GRAPH.items():
        if not name.startswith(ABOVE_THE_SEAMS):
            continue
        targets = runtime.union(*(t for _, t in typing_only))
        offenders += _reaches_past_a_seam(name, targets, MODULES[name].read_text())
    assert offenders == []


MAX_LINES = 600


def test_modules_stay_small() -> None:
    """Small modules with one job: none over 600 lines (generated code aside)."""
    folders = [*PACKAGES.values(), "tests", "bench", "examples"]
    too_long = [
        f"{path.relative_to(ROOT)}: {n}"
        for folder in folders
        for path in sorted((ROOT / folder).rglob("*.py"))
        if not path.name.endswith("_pb2.py")
        and (n := len(path.read_text().splitlines())) > MAX_LINES
    ]
    assert too_long == []


def test_connection_layer_reaches_no_cursor_or_dispatcher() -> None:
    """Issue 8: the connection layer, the service and the consumer name no
    concrete topic or subscription class and reach no cursor or dispatcher."""
    offenders = []
    for name in (
        "connection/cnx.py",
        "connection/producers.py",
        "connection/consumers.py",
        "service/broker_service.py",
        "dispatchers/consumer.py",
    ):
        text = (ROOT / "broker" / name).read_text()
        for word in ("PersistentTopic", "PersistentSubscription", r"\.cursor", r"\.dispatcher"):
            if re.search(word + r"\b", text):
                offenders.append(f"{name}: {word}")
    assert offenders == []
