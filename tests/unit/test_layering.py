"""The module layering of DESIGN.md, checked from the source: imports point
one way between packages, floor by floor inside broker/ and client/ (the
FLOORS table), no import cycle anywhere (typing-only imports count, and so do
imports inside functions and `import_module("magnetar....")` strings),
nothing above broker/topics/ reaches past the Topic, Subscription and storage
seams, and no module is over 600 lines."""

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


def _modules(root: Path = ROOT) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            if path.name.endswith("_pb2.py"):
                continue
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(["magnetar", package, *parts])] = path
    return found


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_by_name(node: ast.AST) -> str | None:
    """The module an `importlib.import_module("magnetar....")` (or
    `__import__`) call names: an import the statements do not show."""
    if not (isinstance(node, ast.Call) and node.args):
        return None
    func, first = node.func, node.args[0]
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    named = first.value if isinstance(first, ast.Constant) else None
    return named if name in ("import_module", "__import__") and isinstance(named, str) else None


def _imports(
    module: str, path: Path, modules: dict[str, Path] = MODULES
) -> tuple[set[str], list[tuple[int, set[str]]]]:
    """(runtime imports of our modules, [(line, typing-only imports)]): import
    statements anywhere (in functions too) and `import_module` strings."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only_nodes: set[int] = set()
    blocks: list[tuple[int, list[ast.stmt]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            blocks.append((node.lineno, node.body))
            for inner in node.body:
                typing_only_nodes.update(id(n) for n in ast.walk(inner))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]

    def targets(node: ast.AST) -> set[str]:
        names: set[str] = set()
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([package.rsplit(".", node.level - 1)[0], *filter(None, [base])])
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                names.add(candidate if candidate in modules else base)
        elif (named := _imported_by_name(node)) is not None:
            names.add(named)
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


Graph = dict[str, tuple[set[str], list[tuple[int, set[str]]]]]


def _graph(root: Path = ROOT) -> Graph:
    modules = _modules(root)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


GRAPH = _graph()


def _package(module: str) -> str:
    return module.split(".")[1]


def _wrong_package_imports(graph: Graph, package: str) -> set[str]:
    return {
        f"{name} -> {target}"
        for name, (runtime, typing_only) in graph.items()
        if _package(name) == package
        for target in runtime.union(*(t for _, t in typing_only))
        if _package(target) not in ALLOWED[package] | {package}
    }


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_one_way(package: str) -> None:
    """DESIGN: proto imports nothing of ours; broker and client import proto
    and never each other (`import_module` strings included); spark_connector
    imports client."""
    assert _wrong_package_imports(GRAPH, package) == set()


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


# The floors inside broker/ and client/, top to bottom (DESIGN "Module map",
# README "Layout", broker/__init__.py). A unit is a subpackage or a module,
# named below magnetar.<package>; `x.__init__` is package x's own __init__.
# A module imports its own unit and units on floors below its own, never one
# on its floor or above (typing-only imports and `import_module` strings
# count); so the units form no cycle.
FLOORS: dict[str, list[tuple[str, ...]]] = {
    "broker": [
        ("__init__", "__main__"),  # the map; `magnetar-broker`
        ("server",),  # the process: listeners, start and stop
        ("admin", "web"),  # the admin REST API; metrics and health over HTTP
        ("cluster", "connection"),  # cluster mode on etcd; ServerCnx and its commands
        ("service",),  # BrokerService, lookups, schema registry, policy apply, expiry
        ("replication",),  # geo-replication: replicators, their producers on remotes
        ("observability",),  # metrics, topic metrics, the stats update, logging
        ("topics",),  # Topic and Subscription, persistent and non-persistent
        ("dispatchers",),  # delivery patterns, the broker-side consumer, entries
        ("policies",),  # the catalog, the resolver, rates, backlog quotas
        ("auth", "compaction", "features", "schemas"),
        ("commands", "resources", "storage_setup"),  # frames; metadata; opening storage
        ("config", "counters", "eager", "endpoint", "errors", "log_throttle", "storage"),
    ],
    "client": [
        ("cli",),  # the `magnetar` command
        ("__init__", "_pulsar", "asyncio"),  # the `pulsar` and `pulsar.asyncio` shapes
        ("sync",),  # the blocking facade
        ("schema",),  # the official client's schema classes
        ("aio.__init__",),  # magnetar.client.aio's names
        ("aio.client",),  # the async Client
        ("aio.reader",),  # readers, table views
        ("aio.consumer", "aio.producer"),
        ("aio.net",),  # connections, pool, lookup, auth, ClientContext, reconnects
        ("aio",),  # aio's own modules: configuration, messages, errors, checks...
    ],
}


def _unit(module: str, path: Path, floors: list[tuple[str, ...]]) -> tuple[str, int] | None:
    """(unit, floor) of one of our modules: the longest unit it falls in."""
    parts = module.split(".")[2:]
    if path.name == "__init__.py":
        parts.append("__init__")
    name = ".".join(parts)
    best: tuple[str, int] | None = None
    for floor, units in enumerate(floors):
        for unit in units:
            if (name == unit or name.startswith(unit + ".")) and (
                best is None or len(unit) > len(best[0])
            ):
                best = (unit, floor)
    return best


def layering_problems(root: Path, floors: dict[str, list[tuple[str, ...]]]) -> list[str]:
    """Each import inside a package of `floors` that does not point to a lower
    floor, each module with no floor, and each cycle between units."""
    modules = _modules(root)
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    problems: list[str] = []
    units: dict[str, list[str]] = {}
    for name, (runtime, typing_only) in graph.items():
        package = _package(name)
        if package not in floors:
            continue
        here = _unit(name, modules[name], floors[package])
        if here is None:
            problems.append(f"{name}: on no floor")
            continue
        for target in sorted(runtime.union(*(t for _, t in typing_only))):
            if _package(target) != package or target not in modules:
                continue
            there = _unit(target, modules[target], floors[package])
            if there is None or there[0] == here[0]:
                continue
            units.setdefault(f"{package}.{here[0]}", []).append(f"{package}.{there[0]}")
            if there[1] <= here[1]:
                problems.append(f"{name} -> {target}: {here[0]} imports {there[0]}, not below it")
    problems += [f"cycle: {' '.join(c)}" for c in strongly_connected(_unit_edges(units))]
    return problems


def _unit_edges(units: dict[str, list[str]]) -> dict[str, list[str]]:
    nodes = set(units).union(*units.values())
    return {node: sorted(set(units.get(node, []))) for node in sorted(nodes)}


def test_floors_are_kept() -> None:
    """Issue 47: inside broker/ and client/ every import points to a lower
    floor, and no units import each other."""
    assert layering_problems(ROOT, FLOORS) == []


def test_every_unit_on_a_floor_exists() -> None:
    """The table names each unit once, and each one is there."""
    for package, floors in FLOORS.items():
        listed = [unit for units in floors for unit in units]
        assert len(listed) == len(set(listed))
        found = {
            unit
            for name, path in MODULES.items()
            if _package(name) == package and (unit := _unit(name, path, floors))
        }
        assert set(listed) == {unit for unit, _ in found}


def _plant(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in PACKAGES.values():
        (root / folder).mkdir(exist_ok=True)
    return root


def test_floor_check_catches_a_back_arrow(tmp_path: Path) -> None:
    """The check can fail: in a small tree, dispatchers/ importing topics/ (a
    floor above it) while topics/ imports dispatchers/ is reported, as an
    import going up and as a cycle; the downward import alone is not."""
    root = _plant(
        tmp_path,
        {
            "broker/__init__.py": "",
            "broker/topics/__init__.py": "",
            "broker/topics/base.py": "from magnetar.broker.dispatchers import shared\n",
            "broker/dispatchers/__init__.py": "",
            "broker/dispatchers/shared.py": "def f() -> None:\n"
            "    from magnetar.broker.topics.base import Topic\n",
        },
    )
    assert layering_problems(root, FLOORS) == [
        "magnetar.broker.dispatchers.shared -> magnetar.broker.topics.base: "
        "dispatchers imports topics, not below it",
        "cycle: broker.dispatchers broker.topics",
    ]
    (root / "broker/dispatchers/shared.py").write_text("")
    assert layering_problems(root, FLOORS) == []


def test_floor_check_sees_import_module_and_typing_only_imports(tmp_path: Path) -> None:
    """An `import_module("magnetar....")` string and an `if TYPE_CHECKING:`
    import count as imports; a module on no floor is reported."""
    root = _plant(
        tmp_path,
        {
            "client/__init__.py": "",
            "client/aio/__init__.py": "",
            "client/aio/net/__init__.py": "",
            "client/aio/net/pool.py": "import importlib\n"
            "client = importlib.import_module('magnetar.client.aio.client')\n",
            "client/aio/client.py": "",
            "client/aio/errors.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from magnetar.client.aio.net import pool\n",
            "client/extra/__init__.py": "",
        },
    )
    assert layering_problems(root, FLOORS) == [
        "magnetar.client.aio.errors -> magnetar.client.aio.net.pool: "
        "aio imports aio.net, not below it",
        "magnetar.client.aio.net.pool -> magnetar.client.aio.client: "
        "aio.net imports aio.client, not below it",
        "magnetar.client.extra: on no floor",
    ]


def test_package_check_catches_the_client_loading_the_broker(tmp_path: Path) -> None:
    """The check can fail: a client module that loads the broker with
    importlib, or imports it in a function, is reported."""
    root = _plant(
        tmp_path,
        {
            "client/cli/run.py": "import importlib\n"
            "def main() -> None:\n"
            "    importlib.import_module('magnetar.broker.server').main()\n"
            "    from magnetar.broker import config\n",
            "broker/server.py": "",
            "broker/config.py": "",
        },
    )
    assert _wrong_package_imports(_graph(root), "client") == {
        "magnetar.client.cli.run -> magnetar.broker.server",
        "magnetar.client.cli.run -> magnetar.broker.config",
    }


# Above the seams: these packages see topics only as topics.base.Topic and
# Subscription, and storage only through storage.api.
ABOVE_THE_SEAMS = (
    "magnetar.broker.admin",
    "magnetar.broker.cluster",
    "magnetar.broker.connection",
    "magnetar.broker.observability",
    "magnetar.broker.policies",
    "magnetar.broker.replication",
    "magnetar.broker.service",
)
# Modules behind the seams, and the concrete classes they define.
BEHIND_THE_SEAMS = (
    "magnetar.broker.topics.persistent",
    "magnetar.broker.topics.non_persistent",
    "magnetar.broker.topics.persistent_subscription",
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
