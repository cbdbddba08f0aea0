"""The broker's own suites for compaction, retention, TTL, partitioned
topics, deduplication and seeking, run again with every broker's ledgers on
object storage (conftest.py's broker_defaults): what they check must hold
on either storage engine. Retention's file count is replaced by the
bucket's bytes."""

from __future__ import annotations

import time

from magnetar.broker.storage.objects.factory import ObjectManagedLedgerFactory
from magnetar.broker.storage.objects.store import ObjectStore, ObjectStoreConfig
from tests.integration.broker.test_broker_admin_partitioned import *  # noqa: F403
from tests.integration.broker.test_broker_compaction import *  # noqa: F403
from tests.integration.broker.test_broker_dedup import *  # noqa: F403
from tests.integration.broker.test_broker_retention import *  # noqa: F403
from tests.integration.broker.test_broker_retention import _consume, _namespace, _produce
from tests.integration.broker.test_broker_seek import *  # noqa: F403
from tests.integration.broker.test_broker_ttl import *  # noqa: F403
from tests.support.brokers import BrokerFactory
from tests.support.seaweedfs import SeaweedServer

# It counts ledger files in the data directory: files only. Its object
# storage form follows.
del test_consumed_ledgers_are_deleted  # noqa: F821


def test_consumed_ledgers_leave_the_bucket(
    broker_factory: BrokerFactory, seaweedfs: SeaweedServer, object_store_url: str
) -> None:
    """SEM retention on object storage: once the subscription consumed
    everything, the sweep trims the closed ledgers and the collector deletes
    their objects; the bucket keeps what is still retained."""
    broker = broker_factory(
        managed_ledger_max_segment_size=4096,
        managed_ledger_max_entries_per_ledger=20,
        managed_ledger_min_ledger_rollover_time_minutes=0,
        message_expiry_check_interval_seconds=0.2,
    )
    consumed = _namespace(broker, None)
    kept = _namespace(broker, {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    bucket = ObjectStore(ObjectStoreConfig(object_store_url, endpoint=seaweedfs.endpoint))
    assert broker.server is not None and broker.server.service is not None
    factory = broker.server.service.factory
    assert isinstance(factory, ObjectManagedLedgerFactory)
    collector = factory.collector
    collector.grace_s = 0.0

    def bucket_bytes() -> int:
        listed = broker.call(bucket.list_objects(""))
        return sum(o.size for o in listed)

    _produce(broker, f"persistent://public/{kept}/t")
    kept_bytes = bucket_bytes()
    _produce(broker, f"persistent://public/{consumed}/t")
    both = bucket_bytes()
    assert both > 1.8 * kept_bytes
    _consume(broker, f"persistent://public/{consumed}/t")
    deadline = time.monotonic() + 30
    while True:
        broker.call(collector.collect_once())
        now = bucket_bytes()
        if now <= kept_bytes * 1.15:
            break
        assert time.monotonic() < deadline, f"bucket still holds {now} bytes, {kept_bytes} kept"
        time.sleep(0.3)
    # What is retained still reads whole.
    _consume(broker, f"persistent://public/{kept}/t")
