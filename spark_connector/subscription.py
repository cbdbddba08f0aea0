"""The `subscription` option: a stream source acknowledges, on a durable
subscription of that name, what its committed micro-batches read, so the
broker can let retention delete it (the offsets stay in Spark's checkpoint;
the subscription only marks progress for the broker and for backlog stats)."""

from __future__ import annotations

from collections.abc import Mapping

from magnetar.client import Client, ConsumerType, InitialPosition, MessageId
from magnetar.proto.ids import MessageId as RawMessageId
from magnetar.spark_connector.offsets import BEFORE_FIRST, Position


def acknowledge_up_to(
    client: Client, subscription: str, offsets: Mapping[str, Position]
) -> dict[str, Position]:
    """Acknowledge cumulatively, per partition, up to its offset (a new
    subscription starts at the earliest message, so nothing unread is
    released); returns the offsets now acknowledged."""
    done: dict[str, Position] = {}
    for partition, position in sorted(offsets.items()):
        consumer = client.subscribe(
            partition,
            subscription,
            # Failover: one driver at a time acknowledges; a restarted one may
            # subscribe while the old connection is still being torn down.
            consumer_type=ConsumerType.Failover,
            initial_position=InitialPosition.Earliest,
            receiver_queue_size=1,
            ack_receipt_enabled=True,  # the broker stored it once this returns
        )
        try:
            if position != BEFORE_FIRST:
                ledger, entry, index = position
                target = RawMessageId(ledger, entry, -1, index)
                consumer.acknowledge_cumulative(MessageId.wrap(target))
            done[partition] = list(position)
        finally:
            consumer.close()
    return done
