"""The topic and storage seams, checked from the source and on real objects.

Admin, metrics, policies, the broker service, connections and the cluster
code reach topics through topics/base.py (Topic, StoredTopic, their
subscriptions, is_persistent) and storage through storage/api.py only: no
import of a concrete topic, subscription, ledger or cursor module, and no
use of their classes (no isinstance on them either). The storage package's
own exports (the factory a composition root opens) are allowed.
"""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from magnetar.broker.storage import FileManagedLedgerFactory
from magnetar.broker.storage.api import (
    WRITE_LATENCY_BOUNDS,
    ManagedLedger,
    ManagedLedgerConfig,
    SyncPolicy,
)
from magnetar.broker.topics.base import (
    StoredSubscription,
    StoredTopic,
    Topic,
    is_persistent,
)
from magnetar.broker.topics.non_persistent import NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.subscription import PersistentSubscription
from magnetar.proto.naming import TopicName

ROOT = Path(__file__).resolve().parents[3]
ABOVE_TOPICS = ("admin", "observability", "policies", "service", "connection", "cluster")
CONCRETE_MODULES = {
    "magnetar.broker.topics.persistent",
    "magnetar.broker.topics.non_persistent",
    "magnetar.broker.topics.subscription",
}
CONCRETE_CLASSES = {
    "PersistentTopic",
    "NonPersistentTopic",
    "PersistentSubscription",
    "NonPersistentSubscription",
    "ManagedLedgerImpl",
    "ManagedCursorImpl",
}
STORAGE = "magnetar.broker.storage"
# (importing module, imported module) pairs allowed, and why.
ALLOWED = {
    # Storage's process-wide Prometheus counters, registered with the broker's
    # registry; no storage class is used.
    ("magnetar.broker.observability.metrics", "magnetar.broker.storage.metrics"),
}


def _sources() -> Iterator[tuple[str, Path]]:
    for folder in ABOVE_TOPICS:
        for path in sorted((ROOT / "broker" / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / "broker").with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(["magnetar", "broker", *parts]), path


def _is_module(name: str) -> bool:
    parts = name.split(".")[2:]  # magnetar.broker.<parts>
    folder = ROOT / "broker" / Path(*parts) if parts else ROOT / "broker"
    return folder.with_suffix(".py").is_file() or (folder / "__init__.py").is_file()


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The modules the statement loads, submodules named by `from package
    import name` included (a package's own exports are the package)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    base = node.module or ""
    if node.level:
        package = module.rsplit(".", node.level)[0]
        base = f"{package}.{base}" if base else package
    submodules = {f"{base}.{alias.name}" for alias in node.names}
    return {base} | {name for name in submodules if _is_module(name)}


def _forbidden_module(name: str) -> bool:
    """The storage package itself (its factory, for the composition roots)
    and storage.api are the seam; its other modules are not."""
    return name in CONCRETE_MODULES or (name.startswith(f"{STORAGE}.") and name != f"{STORAGE}.api")


def _violations(module: str, path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{module}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in sorted(_imported(module, node)):
                if _forbidden_module(name) and (module, name) not in ALLOWED:
                    found.append(f"{where} imports {name}")
            names = {alias.name for alias in node.names} | {
                alias.asname for alias in node.names if alias.asname
            }
            found.extend(f"{where} imports {n}" for n in sorted(names & CONCRETE_CLASSES))
        elif isinstance(node, ast.Name) and node.id in CONCRETE_CLASSES:
            found.append(f"{where} uses {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in CONCRETE_CLASSES:
            found.append(f"{where} uses {node.attr}")
    return found


def test_modules_above_topics_use_only_the_interfaces() -> None:
    sources = list(_sources())
    assert len(sources) > 20  # the folders are where this test thinks they are
    wrong = [v for module, path in sources for v in _violations(module, path)]
    assert not wrong, "\n".join(wrong)


def test_the_checker_sees_each_kind_of_violation(tmp_path: Path) -> None:
    """Guard against a checker that passes by seeing nothing."""
    source = tmp_path / "bad.py"
    source.write_text(
        "from magnetar.broker.topics.persistent import PersistentTopic\n"
        "from magnetar.broker.storage import ledger\n"
        "from ..storage.cursor import cursor_path\n"
        "import magnetar.broker.topics.subscription\n"
        "from magnetar.broker.storage.api import Position\n"
        "def f(t: object, m: object) -> bool:\n"
        "    return isinstance(t, m.ManagedLedgerImpl)\n"
    )
    found = _violations("magnetar.broker.admin.bad", source)
    assert found == [
        "magnetar.broker.admin.bad:1 imports magnetar.broker.topics.persistent",
        "magnetar.broker.admin.bad:1 imports PersistentTopic",
        "magnetar.broker.admin.bad:2 imports magnetar.broker.storage.ledger",
        "magnetar.broker.admin.bad:3 imports magnetar.broker.storage.cursor",
        "magnetar.broker.admin.bad:4 imports magnetar.broker.topics.subscription",
        "magnetar.broker.admin.bad:7 uses ManagedLedgerImpl",
    ]


# mypy --strict checks these: the concrete classes implement the interfaces
# that is_persistent() narrows to on their word.
def _stored_topic(topic: PersistentTopic) -> StoredTopic:
    return topic


def _stored_subscription(sub: PersistentSubscription) -> StoredSubscription:
    return sub


def _topic(topic: NonPersistentTopic) -> Topic:
    return topic


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[ManagedLedger]:
    factory = await FileManagedLedgerFactory.create(
        str(tmp_path), ManagedLedgerConfig(sync_policy=SyncPolicy.NONE)
    )
    try:
        yield await factory.open("public/default/persistent/seams")
    finally:
        await factory.close()


async def test_is_persistent_narrows_by_the_topics_word(ledger: ManagedLedger) -> None:
    stored = PersistentTopic(TopicName.parse("persistent://public/default/seams"), ledger)
    dropped = NonPersistentTopic(TopicName.parse("non-persistent://public/default/seams"))
    topics: list[Topic] = [stored, dropped]
    assert [is_persistent(t) for t in topics] == [True, False]
    await dropped.close(notify_clients=False)
    await stored.close(notify_clients=False)


async def test_ledger_summaries_and_write_stats(ledger: ManagedLedger) -> None:
    assert ledger.write_stats().entries_written == 0
    payloads = [b"a" * 10, b"b" * 20, b"c" * 30]
    for data in payloads:
        await ledger.add_entry(data)
    (summary,) = ledger.ledger_summaries()
    assert summary.ledger_id == ledger.last_confirmed_position.ledger_id
    assert summary.entries == 3
    # Records: the entry bytes plus a header each.
    assert summary.size > sum(map(len, payloads))
    written = ledger.write_stats()
    assert (written.entries_written, written.bytes_written) == (3, 60)
    assert len(written.write_latency_counts) == len(WRITE_LATENCY_BOUNDS) + 1
    assert sum(written.write_latency_counts) >= 1
    assert written.write_latency_sum >= 0.0
