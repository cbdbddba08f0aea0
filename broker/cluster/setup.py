"""Open a cluster member's storage: the etcd metadata store, its session,
and the managed ledger factory on the shared data directory, guarded by
the session (a write is confirmed only while the lease surely lives)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from magnetar.broker.cluster.etcd_store import EtcdMetadataStore
from magnetar.broker.cluster.member import ClusterMember
from magnetar.broker.cluster.metrics import ClusterMetrics
from magnetar.broker.config import BrokerConfig
from magnetar.broker.storage.api import ManagedLedgerFactory, MetadataStore
from magnetar.broker.storage_setup import open_factory


async def open_cluster_storage(
    config: BrokerConfig, registry: CollectorRegistry
) -> tuple[ManagedLedgerFactory, MetadataStore, ClusterMember]:
    """The caller closes the member, then the factory, then the store; the
    cluster's metrics go into `registry`."""
    store = await EtcdMetadataStore.connect(config.metadata_url)
    try:
        member = ClusterMember(
            store.client, config, metadata_key=store.key, metrics=ClusterMetrics(registry)
        )
        await member.open_session()
        try:
            config.data_dir.mkdir(parents=True, exist_ok=True)
            factory = await open_factory(config, store, shared=True, write_guard=member.write_guard)
        except BaseException:
            await member.close()
            raise
    except BaseException:
        await store.close()
        raise
    return factory, store, member
