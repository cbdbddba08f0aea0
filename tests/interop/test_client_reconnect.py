"""A broker killed and restarted under a sending producer: nothing is lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.client.aio import (
    Client,
    ConsumerConfiguration,
    InitialPosition,
    MessageId,
    OutgoingMessage,
    Producer,
    ProducerConfiguration,
)
from magnetar.client.aio.errors import PulsarException, Timeout
from tests.interop.conftest import LITE_LACKS, MAGNETAR_LACKS
from tests.support.brokers import BrokerThread, broker_config
from tests.support.lite import PulsarLite
from tests.support.polling import eventually_async

pytestmark = pytest.mark.lite

TOTAL = 300
KILL_AT = 100


def _bounce(broker: PulsarLite | BrokerThread) -> None:
    """Kill (pulsar-lite: SIGKILL; ours: stop) and start again on the same port and data."""
    if isinstance(broker, PulsarLite):
        broker.kill()
        broker.start()
    else:
        broker.restart()


async def _send_through_restart(
    broker: PulsarLite | BrokerThread, batched: bool, producer_name: str | None = None
) -> dict[bytes, int]:
    """Send TOTAL messages, bouncing the broker after KILL_AT; how often each arrived."""
    url = broker.url
    topic = "persistent://public/default/restart-under-load"
    async with Client(
        url,
        operation_timeout_seconds=10,
        initial_backoff_interval_ms=20,
        max_backoff_interval_ms=200,
    ) as client:
        conf = ProducerConfiguration(
            producer_name=producer_name,
            send_timeout_millis=0,
            batching_enabled=batched,
            max_pending_messages=0,
        )
        producer = await client.create_producer(topic, conf)
        assert isinstance(producer, Producer)
        # Subscribed before the first send: it must survive the restart as well.
        earliest = ConsumerConfiguration(initial_position=InitialPosition.Earliest)
        consumer = await client.subscribe(topic, "check", earliest)
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[MessageId]] = []
        bounce: asyncio.Future[None] | None = None
        for i in range(TOTAL):
            future: asyncio.Future[MessageId] = loop.create_future()

            def done(
                error: PulsarException | None,
                msg_id: MessageId | None,
                f: asyncio.Future[MessageId] = future,
            ) -> None:
                if error is not None:
                    f.set_exception(error)
                else:
                    assert msg_id is not None
                    f.set_result(msg_id)

            producer.send_async(OutgoingMessage(b"msg-%d" % i), done)
            futures.append(future)
            if i == KILL_AT:
                bounce = asyncio.ensure_future(asyncio.to_thread(_bounce, broker))
                # The drop is seen (and shown) before the broker is back.
                await eventually_async(
                    "the producer disconnected", lambda: not producer.is_connected(), 10
                )
            await asyncio.sleep(0.001)
        assert bounce is not None
        await bounce
        ids = await asyncio.wait_for(asyncio.gather(*futures), 20)
        assert len(ids) == TOTAL
        await eventually_async("the producer reconnected", producer.is_connected, 10)

        seen: dict[bytes, int] = {}
        while len(seen) < TOTAL:
            try:
                msg = await consumer.receive(3000)
            except Timeout:
                break
            seen[msg.data()] = seen.get(msg.data(), 0) + 1
            await consumer.acknowledge(msg)
        return seen


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
async def test_restart_under_sending_producer_loses_nothing(
    restartable_broker: PulsarLite | BrokerThread, batched: bool
) -> None:
    """SEM-7.5: with send timeout 0 every send completes across a broker restart, none lost."""
    seen = await _send_through_restart(restartable_broker, batched)
    missing = {b"msg-%d" % i for i in range(TOTAL)} - set(seen)
    assert not missing, f"lost {len(missing)} acknowledged messages"


async def test_restart_with_dedup_duplicates_nothing(
    restartable_broker: PulsarLite | BrokerThread,
) -> None:
    """SEM-7.5: with deduplication on, the resent messages are not stored twice."""
    lacks = LITE_LACKS if isinstance(restartable_broker, PulsarLite) else MAGNETAR_LACKS
    if "dedup" in lacks:
        pytest.skip(lacks["dedup"])
    seen = await _send_through_restart(restartable_broker, False, producer_name="dedup-producer")
    assert set(seen) == {b"msg-%d" % i for i in range(TOTAL)}
    assert all(count == 1 for count in seen.values())


async def test_a_broker_down_for_a_while_is_waited_for(tmp_path: Path) -> None:
    """SEM-7.5: a broker that refuses connections for a few seconds (a slow
    restart) does not end reconnecting; with send timeout 0 the sends made
    meanwhile complete once it is back."""
    broker = BrokerThread(broker_config(tmp_path, sync_policy="none")).start()
    topic = "persistent://public/default/down-a-while"
    try:
        async with Client(
            broker.url, operation_timeout_seconds=30, max_backoff_interval_ms=300
        ) as client:
            no_timeout = ProducerConfiguration(send_timeout_millis=0)
            producer = await client.create_producer(topic, no_timeout)
            await producer.send(OutgoingMessage(b"before"))
            port = broker.port
            await asyncio.to_thread(broker.stop)
            await eventually_async(
                "the producer disconnected", lambda: not producer.is_connected(), 10
            )
            pending = [
                asyncio.ensure_future(producer.send(OutgoingMessage(b"during-%d" % i)))
                for i in range(3)
            ]
            await asyncio.sleep(2.5)  # several reconnect attempts are refused meanwhile
            broker.config = broker.config.replace(port=port)
            broker.server = None
            await asyncio.to_thread(broker.start)
            ids = await asyncio.wait_for(asyncio.gather(*pending), 20)
            assert len(ids) == 3
            await eventually_async("the producer reconnected", producer.is_connected, 10)
    finally:
        broker.stop()
