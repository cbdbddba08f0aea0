"""A durable subscription: one cursor, one dispatcher, its consumers.

Acks go to the cursor (SEM-3.1 individual, SEM-3.2 cumulative; the cursor
moves mark-delete and persists it, SEM-3.9). The dispatcher is created for
the subscription type of the first consumer; a consumer of another type is
refused while consumers are attached.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from magnetar.broker.consumer import Consumer, SubType
from magnetar.broker.dispatchers.base import DispatchListener, PersistentDispatcher
from magnetar.broker.dispatchers.shared import SharedDispatcher
from magnetar.broker.dispatchers.single_active import ActiveChangeListener, SingleActiveDispatcher
from magnetar.broker.errors import (
    BrokerServiceError,
    ConsumerBusyError,
    NotAllowedError,
)
from magnetar.broker.storage.api import (
    InvalidPosition,
    ManagedCursor,
    ManagedLedger,
    Position,
    StorageError,
)
from magnetar.proto.errors import ServerError

log = structlog.get_logger(__name__)

_TYPE_NAMES: dict[int, str] = {int(value): name for name, value in SubType.items()}


def sub_type_name(sub_type: int) -> str:
    return _TYPE_NAMES.get(sub_type, str(sub_type))


class PersistentSubscription:
    def __init__(
        self,
        topic_name: str,
        name: str,
        ledger: ManagedLedger,
        cursor: ManagedCursor,
        *,
        partition_index: int = -1,
        max_read_batch_size: int = 100,
        on_dispatch: DispatchListener | None = None,
        on_active_change: ActiveChangeListener | None = None,
    ) -> None:
        self.topic_name = topic_name
        self.name = name
        self.ledger = ledger
        self.cursor = cursor
        self.partition_index = partition_index
        self.sub_type: int | None = None
        self.dispatcher: PersistentDispatcher | None = None
        self._max_read_batch_size = max_read_batch_size
        self._on_dispatch = on_dispatch
        self._on_active_change = on_active_change
        self.is_closed = False

    def __repr__(self) -> str:
        return f"PersistentSubscription({self.topic_name!r}, {self.name!r})"

    @property
    def consumers(self) -> list[Consumer]:
        return self.dispatcher.consumers if self.dispatcher is not None else []

    # ------------------------------------------------------------ consumers

    async def add_consumer(self, consumer: Consumer) -> None:
        if self.is_closed:
            raise BrokerServiceError(
                ServerError.ServiceNotReady, f"subscription {self.name!r} is closing"
            )
        if self.dispatcher is not None and self.dispatcher.consumers:
            if consumer.sub_type != self.sub_type:
                raise ConsumerBusyError(
                    f"subscription {self.name!r} is {sub_type_name(self.sub_type or 0)}; "
                    f"cannot attach a {sub_type_name(consumer.sub_type)} consumer"
                )
        elif self.dispatcher is None or consumer.sub_type != self.sub_type:
            await self._replace_dispatcher(consumer.sub_type)
        assert self.dispatcher is not None
        self.dispatcher.add_consumer(consumer)

    async def _replace_dispatcher(self, sub_type: int) -> None:
        old = self.dispatcher
        if old is not None:
            # No consumer is attached to it any more: a new type may take over.
            self.dispatcher = None
            await old.close()
        dispatcher: PersistentDispatcher
        kwargs = {
            "max_read_batch_size": self._max_read_batch_size,
            "on_dispatch": self._on_dispatch,
            "name": f"{self.topic_name}/{self.name}",
        }
        if sub_type in (SubType.Exclusive, SubType.Failover):
            single = SingleActiveDispatcher(self.ledger, self.cursor, **kwargs)  # type: ignore[arg-type]
            single.configure(
                exclusive=sub_type == SubType.Exclusive,
                partition_index=self.partition_index,
                on_active_change=self._on_active_change,
            )
            dispatcher = single
        elif sub_type == SubType.Shared:
            dispatcher = SharedDispatcher(self.ledger, self.cursor, **kwargs)  # type: ignore[arg-type]
        else:
            raise NotAllowedError(
                f"subscription type {sub_type_name(sub_type)} is not supported yet"
            )
        self.dispatcher = dispatcher
        self.sub_type = sub_type
        if old is not None:
            # The old dispatcher may have read ahead of unacked messages.
            dispatcher.rewind()

    def remove_consumer(self, consumer: Consumer) -> None:
        consumer.is_closed = True
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)

    # ----------------------------------------------------------------- acks

    def acknowledge_individual(
        self,
        consumer: Consumer,
        positions: Sequence[Position],
        ack_sets: Sequence[list[int] | None],
    ) -> None:
        whole: list[Position] = []
        cursor = self.cursor
        for position, ack_set in zip(positions, ack_sets, strict=True):
            if ack_set:
                cursor.delete_batch_indexes(position, ack_set)
                if cursor.is_deleted(position):
                    whole.append(position)
            else:
                whole.append(position)
        if not whole:
            return
        try:
            cursor.delete(whole)
        except InvalidPosition as exc:
            raise BrokerServiceError(ServerError.UnknownError, f"invalid ack: {exc}") from exc
        missing = consumer.remove_pending(whole)
        if len(missing) != len(whole) and self.dispatcher is not None:
            # Acked by a consumer that did not receive them last (after a
            # redelivery): clear them from whoever holds them.
            found = set(missing)
            rest = [p for p in whole if p not in found]
            for other in self.dispatcher.consumers:
                if other is not consumer:
                    other.remove_pending(rest)
        if self.dispatcher is not None:
            self.dispatcher.on_ack(whole)

    def acknowledge_cumulative(self, consumer: Consumer, position: Position) -> None:
        if self.sub_type in (SubType.Shared, SubType.Key_Shared):
            raise NotAllowedError(
                f"cumulative ack is not allowed on {sub_type_name(self.sub_type or 0)} "
                f"subscription {self.name!r} (SEM-3.2); ack messages individually"
            )
        try:
            self.cursor.mark_delete(position)
        except InvalidPosition as exc:
            raise BrokerServiceError(
                ServerError.UnknownError, f"invalid cumulative ack: {exc}"
            ) from exc
        consumer.remove_pending_up_to(position)
        if self.dispatcher is not None:
            self.dispatcher.on_cumulative_ack(position)

    def redeliver(self, consumer: Consumer, positions: Sequence[Position] | None) -> None:
        if self.dispatcher is not None:
            self.dispatcher.redeliver(consumer, positions)

    # ------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Detach the dispatcher and flush the cursor; consumers are closed by the topic."""
        if self.is_closed:
            return
        self.is_closed = True
        if self.dispatcher is not None:
            await self.dispatcher.close()
        try:
            await self.cursor.flush()
        except StorageError as exc:
            log.warning("cursor flush failed", subscription=self.name, error=str(exc))
