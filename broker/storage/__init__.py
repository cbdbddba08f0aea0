"""Broker storage: managed ledgers, managed cursors and the metadata store.

Stores opaque bytes and imports nothing else of Magnetar. See ``api`` for the
public types; implementations are re-exported here.
"""

from magnetar.broker.storage.api import *  # noqa: F403
from magnetar.broker.storage.api import __all__ as _api_all

__all__ = list(_api_all)
