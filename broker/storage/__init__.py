"""Broker storage: managed ledgers, managed cursors and the metadata store.

Stores opaque bytes and imports nothing else of Magnetar. ``api`` holds the
public types; the implementations are re-exported here::

    store = await SqliteMetadataStore.open(path)          # optional, shared
    factory = await FileManagedLedgerFactory.create(data_dir, config, store=store)
    ml = await factory.open("public/default/persistent/t")
"""

from magnetar.broker.storage.api import *  # noqa: F403
from magnetar.broker.storage.api import __all__ as _api_all
from magnetar.broker.storage.factory import FileManagedLedgerFactory
from magnetar.broker.storage.metadata import SqliteMetadataStore
from magnetar.broker.storage.ranges import ack_set_to_int, int_to_ack_set

__all__ = [
    *_api_all,
    "FileManagedLedgerFactory",
    "SqliteMetadataStore",
    "ack_set_to_int",
    "int_to_ack_set",
]
