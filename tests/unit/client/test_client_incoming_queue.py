"""The consumer's incoming queue: batch receive limits (no sockets, no waiting)."""

from __future__ import annotations

import pytest

from magnetar.client.aio.errors import AlreadyClosed, Timeout
from magnetar.client.aio.incoming_queue import IncomingQueue
from magnetar.client.aio.message import Message
from magnetar.client.aio.policies import BatchReceivePolicy
from magnetar.proto.ids import MessageId


def _msg(i: int, size: int = 10) -> Message:
    return Message(b"x" * size, MessageId(1, i), "t", {}, None, None, 0, 0, "p", 0, False, b"")


async def test_batch_stops_at_the_count_limit() -> None:
    """SEM-1 batch_receive_policy: at most max_num_message messages per batch."""
    queue = IncomingQueue()
    for i in range(5):
        queue.put(_msg(i))
    batch = await queue.get_batch(BatchReceivePolicy(3, -1, 100))
    assert [m.message_id().entry_id for m in batch] == [0, 1, 2]
    assert len(queue) == 2 and queue.size_bytes == 20


async def test_batch_stops_before_the_byte_limit() -> None:
    """SEM-1 batch_receive_policy: a batch never grows past max_num_bytes (one message may)."""
    queue = IncomingQueue()
    for i in range(4):
        queue.put(_msg(i, 40))
    batch = await queue.get_batch(BatchReceivePolicy(-1, 100, 100))
    assert len(batch) == 2
    queue.put(_msg(9, 500))
    assert len(await queue.get_batch(BatchReceivePolicy(-1, 100, 100))) == 2


async def test_get_times_out_and_close_fails_waiters() -> None:
    queue = IncomingQueue()
    with pytest.raises(Timeout):
        await queue.get(0)
    queue.close(lambda: AlreadyClosed("closed"))
    with pytest.raises(AlreadyClosed):
        await queue.get()
