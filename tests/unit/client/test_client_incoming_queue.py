"""The consumer's incoming queue: batch receive limits (no sockets, no waiting)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client.aio.consumer.incoming_queue import IncomingQueue
from magnetar.client.aio.errors import AlreadyClosed, Timeout
from magnetar.client.aio.message import Entry, Message
from magnetar.client.aio.policies import BatchReceivePolicy
from magnetar.proto import pulsar_api_pb2 as pb


def _msg(i: int, size: int = 10) -> Message:
    return Message(b"x" * size, Entry("t", 1, i, -1, pb.MessageMetadata()))


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


async def test_put_many_wakes_a_receiver_behind_a_cancelled_one() -> None:
    """SEM-2.3: a receive that timed out leaves no stale waiter that swallows the wake-up."""
    queue = IncomingQueue()
    with pytest.raises(Timeout):
        await queue.get(1)
    waiting = asyncio.ensure_future(queue.get(2000))
    await asyncio.sleep(0)
    queue.put_many([_msg(7)])
    assert (await waiting).message_id().entry_id == 7


async def test_batch_takes_what_fits_in_one_step_then_waits_for_the_count() -> None:
    """SEM-1 batch_receive_policy: queued messages are taken at once; the batch
    then fills up with later ones until the count or the timeout."""
    queue = IncomingQueue()
    queue.put_many([_msg(i) for i in range(3)])
    pending = asyncio.ensure_future(queue.get_batch(BatchReceivePolicy(5, 1000, 2000)))
    await asyncio.sleep(0)
    queue.put_many([_msg(i) for i in range(3, 8)])
    batch = await pending
    assert [m.message_id().entry_id for m in batch] == [0, 1, 2, 3, 4]
    assert len(queue) == 3 and queue.size_bytes == 30
