"""Storage metrics reach a broker's registry and count group commits and reads."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from magnetar.broker.storage import FileManagedLedgerFactory, metrics as storage_metrics


async def test_metrics_are_exposed_through_a_registry(factory: FileManagedLedgerFactory) -> None:
    registry = CollectorRegistry()
    storage_metrics.register(registry)
    storage_metrics.register(registry)  # idempotent

    def value(name: str) -> float:
        got = registry.get_sample_value(name)
        return 0.0 if got is None else got

    entries = value("magnetar_storage_entries_written_total")
    groups = value("magnetar_storage_write_groups_total")
    cache_reads = value("magnetar_storage_cache_reads_total")
    ml = await factory.open("t/n/persistent/metrics")
    (await ml.open_cursor("reading")).set_active()  # entries are cached while one reads
    first = await ml.add_entry(b"abc")
    await ml.add_entry(b"def")
    await ml.read_entries(first, 10)
    assert value("magnetar_storage_entries_written_total") == entries + 2
    assert value("magnetar_storage_write_groups_total") == groups + 2
    assert value("magnetar_storage_cache_reads_total") == cache_reads + 1
    assert b"magnetar_storage_write_seconds_bucket" in generate_latest(registry)
