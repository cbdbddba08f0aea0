"""`magnetar.client.asyncio`, our `pulsar.asyncio`, against each broker: the
official asyncio module's API on the caller's event loop, returning the
blocking facade's Message and MessageId, errors answering `.error()` with
their Result."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest

import magnetar.client as facade
from magnetar.client import asyncio as pulsar_asyncio
from magnetar.client.asyncio import (
    Client,
    Consumer,
    InitialPosition,
    MessageId,
    PulsarException,
    Result,
    _set_future,
)
from magnetar.client.schema import AvroSchema, Integer, Record, String
from tests.interop.conftest import BrokerUnderTest

pytestmark = pytest.mark.lite

Shared = facade.ConsumerType.Shared


@pytest.fixture
async def client(broker: BrokerUnderTest) -> AsyncIterator[Client]:
    c = Client(broker.url, operation_timeout_seconds=5)
    try:
        yield c
    finally:
        await c.close()


async def _send_all(producer: pulsar_asyncio.Producer, count: int) -> list[MessageId]:
    return [await producer.send(b"msg-%d" % i) for i in range(count)]


async def _receive_data(consumer: Consumer, count: int) -> list[bytes]:
    return [(await asyncio.wait_for(consumer.receive(), 10)).data() for _ in range(count)]


async def _nothing_within(consumer: Consumer, seconds: float) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(consumer.receive(), seconds)


# -- producer ------------------------------------------------------------


async def test_concurrent_sends_are_batched_into_one_entry(
    client: Client, broker: BrokerUnderTest
) -> None:
    """Batching is on by default in the asyncio API: sends awaited together
    share an entry, with batch indexes in send order; last_sequence_id is the
    highest acknowledged sequence id."""
    topic = broker.topic("aio-batch")
    producer = await client.create_producer(topic, producer_name="aio-producer")
    assert producer.topic() == topic
    assert producer.producer_name() == "aio-producer"
    assert producer.last_sequence_id() == -1
    ids = await asyncio.gather(*(producer.send(b"m%d" % i) for i in range(5)))
    assert all(type(i) is facade.MessageId for i in ids)
    assert {(i.ledger_id(), i.entry_id()) for i in ids} == {(ids[0].ledger_id(), ids[0].entry_id())}
    assert [i.batch_index() for i in ids] == [0, 1, 2, 3, 4]
    assert producer.last_sequence_id() == 4


async def test_flush_answers_the_batched_sends_first(
    client: Client, broker: BrokerUnderTest
) -> None:
    """flush sends the open batch and returns once every pending send is
    answered: the send tasks are done when flush returns."""
    producer = await client.create_producer(
        broker.topic("aio-flush"), batching_max_messages=3, batching_max_publish_delay_ms=60000
    )
    tasks = [asyncio.create_task(producer.send(b"m%d" % i)) for i in range(2)]
    done, _ = await asyncio.wait(tasks, timeout=0.3)
    assert not done  # the batch is neither full nor due
    await producer.flush()
    assert all(t.done() for t in tasks)
    first, second = (t.result() for t in tasks)
    assert (first.entry_id(), first.batch_index()) == (second.entry_id(), 0)
    assert second.batch_index() == 1


async def test_message_options_reach_the_consumer(client: Client, broker: BrokerUnderTest) -> None:
    """Keys, properties and event time set on send are in the received
    message; messages and ids are the blocking facade's classes."""
    topic = broker.topic("aio-keys")
    consumer = await client.subscribe(topic, "sub")
    producer = await client.create_producer(topic)
    sent = await producer.send(
        b"payload",
        properties={"a": "1"},
        partition_key="pk",
        ordering_key="ok",
        event_timestamp=1234,
    )
    msg = await asyncio.wait_for(consumer.receive(), 10)
    assert isinstance(msg, facade.Message)
    assert (msg.data(), msg.value()) == (b"payload", b"payload")
    assert (msg.partition_key(), msg.ordering_key()) == ("pk", "ok")
    assert msg.properties() == {"a": "1"}
    assert msg.event_timestamp() == 1234
    assert msg.topic_name() == topic
    assert type(msg.message_id()) is facade.MessageId
    assert msg.message_id() == sent


async def test_errors_carry_their_result(client: Client, broker: BrokerUnderTest) -> None:
    """A payload over the broker's max message size fails with MessageTooBig;
    a producer on a missing tenant with TopicNotFound (a Pulsar broker's answer)."""
    producer = await client.create_producer(broker.topic("aio-big"))
    with pytest.raises(PulsarException) as too_big:
        await producer.send(b"x" * (10 * 1024 * 1024))
    assert too_big.value.error() == Result.MessageTooBig
    if broker.kind == "magnetar":
        with pytest.raises(PulsarException) as missing:
            await client.create_producer("no-such-tenant/ns/aio-topic")
        assert missing.value.error() == Result.TopicNotFound


async def test_producer_close_twice_is_already_closed(
    client: Client, broker: BrokerUnderTest
) -> None:
    """A closed producer is not connected; closing it again, flushing or
    sending fails with AlreadyClosed (the official client's results)."""
    producer = await client.create_producer(broker.topic("aio-close"))
    assert producer.is_connected()
    await producer.close()
    assert not producer.is_connected()
    for call in (producer.close, producer.flush, lambda: producer.send(b"late")):
        with pytest.raises(PulsarException) as closed:
            await call()
        assert closed.value.error() == Result.AlreadyClosed


async def test_shutdown_fails_later_calls_and_close_still_works(broker: BrokerUnderTest) -> None:
    """shutdown() is synchronous: later sends fail with AlreadyClosed at once,
    and close() afterwards (and again) waits for the closing and succeeds."""
    client = Client(broker.url, operation_timeout_seconds=5)
    producer = await client.create_producer(broker.topic("aio-shutdown"))
    consumer = await client.subscribe(broker.topic("aio-shutdown"), "sub")
    await producer.send(b"before")
    client.shutdown()
    for call in (
        lambda: producer.send(b"after"),
        lambda: client.create_producer(broker.topic("aio-shutdown")),
        lambda: client.subscribe(broker.topic("aio-shutdown"), "sub2"),
    ):
        with pytest.raises(PulsarException) as closed:
            await call()
        assert closed.value.error() == Result.AlreadyClosed
    await client.close()
    await client.close()
    assert not producer.is_connected() and not consumer.is_connected()
    with pytest.raises(PulsarException) as ended:
        await consumer.receive()
    assert ended.value.error() == Result.AlreadyClosed


async def test_logger_receives_the_client_records_while_open(broker: BrokerUnderTest) -> None:
    """logger= (a logging.Logger, as the official client takes) gets the
    client's records until close, then is detached."""

    class Collect(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    target = logging.getLogger(f"aio-test-{broker.kind}")
    target.setLevel(logging.DEBUG)
    handler = Collect()
    target.addHandler(handler)
    root = logging.getLogger("magnetar.client")
    before = list(root.handlers)
    try:
        client = Client(broker.url, operation_timeout_seconds=5, logger=target)
        assert len(root.handlers) == len(before) + 1
        await client.create_producer(broker.topic("aio-logger"))
        await client.close()
        assert handler.records
        assert root.handlers == before
    finally:
        target.removeHandler(handler)


async def test_token_supplier_failure_is_an_authentication_error(
    broker: BrokerUnderTest,
) -> None:
    """A token supplier that raises fails producer, consumer and reader
    creation with AuthenticationError carrying the supplier's message."""

    def supplier() -> str:
        raise RuntimeError("token supplier failed")

    client = Client(broker.url, authentication=facade.AuthenticationToken(supplier))
    try:
        for call in (
            lambda: client.create_producer(broker.topic("aio-auth")),
            lambda: client.subscribe(broker.topic("aio-auth"), "sub"),
            lambda: client.create_reader(broker.topic("aio-auth"), MessageId.earliest),
        ):
            with pytest.raises(PulsarException) as failed:
                await call()
            assert failed.value.error() == Result.AuthenticationError
            assert "token supplier failed" in str(failed.value)
    finally:
        await client.close()


# -- consumer ------------------------------------------------------------


async def test_cumulative_ack_survives_resubscribe(client: Client, broker: BrokerUnderTest) -> None:
    """A cumulative ack up to the last message received acknowledges every
    earlier one: a new consumer on the subscription gets only what comes next."""
    topic = broker.topic("aio-cumulative")
    consumer = await client.subscribe(topic, "sub")
    producer = await client.create_producer(topic)
    await _send_all(producer, 5)
    last = None
    for _ in range(5):
        last = await asyncio.wait_for(consumer.receive(), 10)
    assert last is not None
    await consumer.acknowledge_cumulative(last)
    await consumer.close()
    consumer = await client.subscribe(topic, "sub")
    await producer.send(b"final")
    assert await _receive_data(consumer, 1) == [b"final"]


async def test_individual_acks_leave_the_others_for_redelivery(
    client: Client, broker: BrokerUnderTest
) -> None:
    """Acked messages (by message or by id) are not delivered again; the
    unacked ones are, to the next consumer of the Shared subscription."""
    topic = broker.topic("aio-acks")
    consumer = await client.subscribe(topic, "sub", consumer_type=Shared)
    producer = await client.create_producer(topic)
    await _send_all(producer, 5)
    msgs = [await asyncio.wait_for(consumer.receive(), 10) for _ in range(5)]
    await consumer.acknowledge(msgs[0])
    await consumer.acknowledge(msgs[2].message_id())
    await consumer.acknowledge(msgs[4])
    await consumer.close()
    await consumer.close()  # idempotent, as the official consumer's close
    consumer = await client.subscribe(topic, "sub", consumer_type=Shared)
    assert await _receive_data(consumer, 2) == [b"msg-1", b"msg-3"]


async def test_cumulative_ack_refused_on_shared(client: Client, broker: BrokerUnderTest) -> None:
    """Cumulative acks are not allowed on a Shared subscription."""
    topic = broker.topic("aio-cumulative-shared")
    consumer = await client.subscribe(topic, "sub", consumer_type=Shared)
    producer = await client.create_producer(topic)
    await producer.send(b"m")
    msg = await asyncio.wait_for(consumer.receive(), 10)
    with pytest.raises(PulsarException) as refused:
        await consumer.acknowledge_cumulative(msg)
    assert refused.value.error() == Result.CumulativeAcknowledgementNotAllowedError


async def test_negative_ack_redelivers_after_the_delay(
    client: Client, broker: BrokerUnderTest
) -> None:
    """Negatively acked messages come again after negative_ack_redelivery_delay_ms;
    acked ones do not."""
    topic = broker.topic("aio-nack")
    consumer = await client.subscribe(
        topic, "sub", consumer_type=Shared, negative_ack_redelivery_delay_ms=100
    )
    producer = await client.create_producer(topic)
    await _send_all(producer, 4)
    msgs = [await asyncio.wait_for(consumer.receive(), 10) for _ in range(4)]
    await consumer.acknowledge(msgs[1])
    await consumer.acknowledge(msgs[3])
    await consumer.negative_acknowledge(msgs[0])
    await consumer.negative_acknowledge(msgs[2].message_id())
    again = [await asyncio.wait_for(consumer.receive(), 10) for _ in range(2)]
    assert sorted(m.data() for m in again) == [b"msg-0", b"msg-2"]
    assert all(m.redelivery_count() == 1 for m in again)


async def test_receive_cancelled_by_a_timeout_loses_nothing(
    client: Client, broker: BrokerUnderTest
) -> None:
    """A receive given up (asyncio.wait_for) takes no message: the next one
    gets what arrives afterwards."""
    topic = broker.topic("aio-cancel")
    consumer = await client.subscribe(topic, "sub")
    producer = await client.create_producer(topic)
    await _nothing_within(consumer, 0.1)
    await producer.send(b"after")
    assert await _receive_data(consumer, 1) == [b"after"]


async def test_topic_list_and_pattern_consumers(client: Client, broker: BrokerUnderTest) -> None:
    """One subscription over a list of topics, then over the topics a regex
    (is_pattern_topic) matches: each message once, acked by its id."""
    tag = f"aio-multi-{broker.kind}-{time.time_ns()}"
    topics = [f"persistent://public/default/{tag}-{i}" for i in range(2)]
    producers = [await client.create_producer(t) for t in topics]
    consumer = await client.subscribe(topics, "sub")
    assert consumer.subscription_name() == "sub"
    for i, producer in enumerate(producers):
        await producer.send(b"from-%d" % i)

    async def receive_both(consumer: Consumer) -> set[tuple[str, bytes]]:
        got = set()
        for _ in range(2):
            msg = await asyncio.wait_for(consumer.receive(), 10)
            got.add((msg.topic_name(), msg.data()))
            await consumer.acknowledge(msg.message_id())
        return got

    expected = {(t, b"from-%d" % i) for i, t in enumerate(topics)}
    assert await receive_both(consumer) == expected
    await consumer.close()
    broker.require("topics_of_namespace")
    consumer = await client.subscribe(
        f"public/default/{tag}-.*",
        "sub-pattern",
        is_pattern_topic=True,
        initial_position=InitialPosition.Earliest,
    )
    assert await receive_both(consumer) == expected


async def test_partitioned_topic(broker: BrokerUnderTest) -> None:
    """get_topic_partitions names a partitioned topic's partitions (a plain
    topic: itself); a consumer of the topic receives from its partitions."""
    url, topic = broker.partitioned_topic("aio-pt")
    client = Client(url, operation_timeout_seconds=5)
    try:
        partitions = await client.get_topic_partitions(topic)
        assert partitions == [f"{topic}-partition-{i}" for i in range(len(partitions))]
        assert len(partitions) > 1
        consumer = await client.subscribe(topic, "sub", consumer_type=Shared)
        producer = await client.create_producer(topic)
        await producer.send(b"hello")
        msg = await asyncio.wait_for(consumer.receive(), 10)
        assert msg.topic_name() in partitions
        if broker.kind == "magnetar":  # pulsar-lite makes every new topic partitioned
            plain = broker.topic("aio-plain")
            assert await client.get_topic_partitions(plain) == [plain]
    finally:
        await client.close()


async def test_get_last_message_id(client: Client, broker: BrokerUnderTest) -> None:
    """get_last_message_id gives the topic's last stored message as the
    facade's MessageId, which can be acknowledged."""
    topic = broker.topic("aio-last")
    consumer = await client.subscribe(topic, "sub", consumer_type=Shared)
    producer = await client.create_producer(topic)
    for i in range(3):
        sent = await producer.send(b"m%d" % i)
        last = await consumer.get_last_message_id()
        assert type(last) is facade.MessageId
        assert (last.ledger_id(), last.entry_id()) == (sent.ledger_id(), sent.entry_id())
        await consumer.acknowledge(last)


async def test_dead_letter_policy(client: Client, broker: BrokerUnderTest) -> None:
    """SEM-6.1 (amended): a message is delivered max_redeliver_count + 1
    times (redelivery counts 0 .. max); the redelivery of everything unacked
    after the last sends it to the dead letter topic instead of the consumer."""
    topic = broker.topic("aio-dlq")
    dlq_topic = f"{topic}-DLQ"
    dlq = await client.subscribe(dlq_topic, "sub", consumer_type=Shared)
    consumer = await client.subscribe(
        topic,
        "sub",
        consumer_type=Shared,
        dead_letter_policy=facade.ConsumerDeadLetterPolicy(2, dlq_topic, "init-sub"),
    )
    producer = await client.create_producer(topic)
    await _send_all(producer, 3)
    for _ in range(3):
        await _receive_data(consumer, 3)
        consumer.redeliver_unacknowledged_messages()
    await _nothing_within(consumer, 0.3)
    assert sorted(await _receive_data(dlq, 3)) == [b"msg-0", b"msg-1", b"msg-2"]


async def test_unsubscribe_then_subscribe_again(client: Client, broker: BrokerUnderTest) -> None:
    """unsubscribe deletes the subscription and closes the consumer; the name
    can be subscribed again."""
    topic = broker.topic("aio-unsub")
    consumer = await client.subscribe(topic, "sub")
    await consumer.unsubscribe()
    assert not consumer.is_connected()
    again = await client.subscribe(topic, "sub")
    assert again.is_connected()


async def test_consumer_seek_to_publish_time(client: Client, broker: BrokerUnderTest) -> None:
    """seek(publish time in ms) restarts the subscription at the first message
    published at or after it, also behind what was received already."""
    broker.require("seek")
    topic = broker.topic("aio-seek-time")
    consumer = await client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    producer = await client.create_producer(topic)
    await _send_all(producer, 3)
    # A batch's publish time is when it is flushed, up to a millisecond before
    # its receipt: step off msg-2's millisecond.
    await asyncio.sleep(0.01)
    middle = int(time.time() * 1000)
    await asyncio.sleep(0.01)
    for i in (3, 4):
        await producer.send(b"msg-%d" % i)
    assert await _receive_data(consumer, 5) == [b"msg-%d" % i for i in range(5)]
    await consumer.seek(middle)
    assert await _receive_data(consumer, 1) == [b"msg-3"]


async def test_consumer_seek_to_message_id(client: Client, broker: BrokerUnderTest) -> None:
    """seek(message id) restarts the subscription just after that message, or
    at it with start_message_id_inclusive."""
    broker.require("seek")
    topic = broker.topic("aio-seek-id")
    producer = await client.create_producer(topic)
    ids = await _send_all(producer, 5)
    for inclusive, expected in ((False, b"msg-3"), (True, b"msg-2")):
        consumer = await client.subscribe(
            topic,
            "sub",
            initial_position=InitialPosition.Earliest,
            start_message_id_inclusive=inclusive,
        )
        await consumer.seek(ids[2])
        assert await _receive_data(consumer, 1) == [expected]
        await consumer.close()


# -- reader ---------------------------------------------------------------


async def test_reader_from_earliest_latest_and_an_id(
    client: Client, broker: BrokerUnderTest
) -> None:
    """A reader starts at the earliest message, after the latest one, or just
    after a given id; read_next waits until cancelled."""
    topic = broker.topic("aio-reader")
    producer = await client.create_producer(topic)
    ids = await _send_all(producer, 4)
    earliest = await client.create_reader(topic, MessageId.earliest)
    assert earliest.topic() == topic and earliest.is_connected()
    assert [(await earliest.read_next()).data() for _ in range(4)] == [
        b"msg-%d" % i for i in range(4)
    ]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(earliest.read_next(), 0.3)
    latest = await client.create_reader(topic, MessageId.latest)
    after = await client.create_reader(topic, ids[1])
    await producer.send(b"msg-4")
    msg = await asyncio.wait_for(latest.read_next(), 10)
    assert isinstance(msg, facade.Message) and msg.data() == b"msg-4"
    assert [(await after.read_next()).data() for _ in range(3)] == [b"msg-2", b"msg-3", b"msg-4"]
    await earliest.close()
    await earliest.close()
    assert not earliest.is_connected()


async def test_reader_has_message_available(client: Client, broker: BrokerUnderTest) -> None:
    """has_message_available is True while messages after the reader's
    position exist, False once it read the last one."""
    broker.require("reader_latest_available")
    topic = broker.topic("aio-available")
    producer = await client.create_producer(topic)
    reader = await client.create_reader(topic, MessageId.latest)
    assert not await reader.has_message_available()
    await _send_all(producer, 3)
    for _ in range(3):
        assert await reader.has_message_available()
        await asyncio.wait_for(reader.read_next(), 10)
    assert not await reader.has_message_available()


async def test_reader_seek(client: Client, broker: BrokerUnderTest) -> None:
    """A reader's seek to an id resumes after it, or at it with start_message_id_inclusive."""
    broker.require("seek")
    topic = broker.topic("aio-reader-seek")
    producer = await client.create_producer(topic)
    ids = await _send_all(producer, 5)
    for inclusive, expected in ((False, b"msg-3"), (True, b"msg-2")):
        reader = await client.create_reader(
            topic, MessageId.latest, start_message_id_inclusive=inclusive
        )
        await reader.seek(ids[2])
        assert (await asyncio.wait_for(reader.read_next(), 10)).data() == expected
        await reader.close()


async def test_schema_values_round_trip(client: Client, broker: BrokerUnderTest) -> None:
    """With a schema, send takes objects (and refuses others) and value()
    decodes them, for consumers and readers alike."""

    class Example(Record):
        name = String()
        count = Integer()

    topic = broker.topic("aio-schema")
    producer = await client.create_producer(topic, schema=AvroSchema(Example))
    consumer = await client.subscribe(topic, "sub", schema=AvroSchema(Example))
    await producer.send(Example(name="x", count=42))
    value = (await asyncio.wait_for(consumer.receive(), 10)).value()
    assert isinstance(value, Example)
    assert value == Example(name="x", count=42)
    reader = await client.create_reader(topic, MessageId.earliest, schema=AvroSchema(Example))
    assert (await asyncio.wait_for(reader.read_next(), 10)).value() == Example(name="x", count=42)
    with pytest.raises((TypeError, ValueError)):
        await producer.send(b"not a record")


# -- no broker ------------------------------------------------------------


async def test_arguments_are_checked_before_any_request() -> None:
    """Wrong argument types raise ValueError as the official module does,
    before anything is sent (nothing listens on this address)."""
    client = Client("pulsar://127.0.0.1:9", operation_timeout_seconds=1)
    try:
        with pytest.raises(ValueError):
            await client.create_producer("t", batching_enabled=True, chunking_enabled=True)
        with pytest.raises(ValueError):
            await client.subscribe(["a", "b"], "sub", is_pattern_topic=True)
        with pytest.raises(ValueError):
            await client.subscribe(("a", "b"), "sub")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            await client.create_reader("t", "earliest")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            await client.get_topic_partitions(1)  # type: ignore[arg-type]
    finally:
        await client.close()


async def test_set_future_leaves_a_done_future_alone() -> None:
    """_set_future (the official bridge from result callbacks) completes a
    pending future from any thread, and ignores a cancelled or answered one."""
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[str] = loop.create_future()
    answered.set_result("first")
    _set_future(answered, Result.Ok, "late")
    cancelled: asyncio.Future[str] = loop.create_future()
    cancelled.cancel()
    _set_future(cancelled, Result.Ok, "late")
    ok: asyncio.Future[str] = loop.create_future()
    await asyncio.to_thread(_set_future, ok, Result.Ok, "value")
    failed: asyncio.Future[str] = loop.create_future()
    _set_future(failed, Result.TopicNotFound, None)
    assert await ok == "value"
    with pytest.raises(PulsarException) as error:
        await failed
    assert error.value.error() == Result.TopicNotFound
    assert answered.result() == "first" and cancelled.cancelled()
