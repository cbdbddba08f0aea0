"""The one place a subscription type becomes a dispatcher.

Each dispatcher is complete when its constructor returns; Key_Shared picks
its selector from the first consumer's KeySharedMeta and the broker option.
Persistent and non-persistent topics share the patterns, not the machinery:
a persistent dispatcher reads a cursor, a non-persistent one dispatches or
drops each entry as it is published.
"""

from __future__ import annotations

from magnetar.broker.dispatchers.base import DispatcherSettings, PersistentDispatcher
from magnetar.broker.dispatchers.consumer import SubType, sub_type_name
from magnetar.broker.dispatchers.key_shared import KeySharedDispatcher
from magnetar.broker.dispatchers.non_persistent import (
    NonPersistentDispatcher,
    NonPersistentKeySharedDispatcher,
    NonPersistentSharedDispatcher,
    NonPersistentSingleActiveDispatcher,
)
from magnetar.broker.dispatchers.shared import SharedDispatcher
from magnetar.broker.dispatchers.single_active import SingleActiveDispatcher
from magnetar.broker.errors import NotAllowedError
from magnetar.broker.storage.api import ManagedCursor, ManagedLedger


def new_dispatcher(
    sub_type: int, ledger: ManagedLedger, cursor: ManagedCursor, settings: DispatcherSettings
) -> PersistentDispatcher:
    """A dispatcher for `sub_type`; NotAllowedError for a type not served yet."""
    if sub_type == SubType.Exclusive:
        return SingleActiveDispatcher(ledger, cursor, settings, exclusive=True)
    if sub_type == SubType.Failover:
        return SingleActiveDispatcher(ledger, cursor, settings, exclusive=False)
    if sub_type == SubType.Shared:
        return SharedDispatcher(ledger, cursor, settings)
    if sub_type == SubType.Key_Shared:
        return KeySharedDispatcher(ledger, cursor, settings)
    raise _not_supported(sub_type)


def new_non_persistent_dispatcher(
    sub_type: int, settings: DispatcherSettings
) -> NonPersistentDispatcher:
    """A non-persistent topic's dispatcher for `sub_type`; NotAllowedError for
    a type not served yet."""
    if sub_type == SubType.Exclusive:
        return NonPersistentSingleActiveDispatcher(settings, exclusive=True)
    if sub_type == SubType.Failover:
        return NonPersistentSingleActiveDispatcher(settings, exclusive=False)
    if sub_type == SubType.Shared:
        return NonPersistentSharedDispatcher(settings)
    if sub_type == SubType.Key_Shared:
        return NonPersistentKeySharedDispatcher(settings)
    raise _not_supported(sub_type)


def _not_supported(sub_type: int) -> NotAllowedError:
    return NotAllowedError(f"subscription type {sub_type_name(sub_type)} is not supported yet")
