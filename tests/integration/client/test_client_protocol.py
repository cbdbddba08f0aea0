"""Our client against scripted brokers: lookup, errors, timeouts, reconnects, keepalive.

The fake broker (tests/support/fake_broker) speaks the protocol with our
codec on real sockets and lets each test script a command's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from aiohttp import web

from magnetar.client.aio import Client, OutgoingMessage, Producer, ProducerConfiguration, errors
from magnetar.client.aio.enums import ProducerAccessMode
from magnetar.client.aio.net.connection import ClientConnection
from magnetar.client.aio.producer.partitioned import PartitionedProducer
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ServerError
from magnetar.proto.frames import Frame, wrap
from tests.support.fake_broker import FakeBroker, FakeConnection, Reply

T = pb.BaseCommand
TOPIC = "persistent://public/default/scripted"


@contextlib.contextmanager
def fake_broker(**options: object) -> Iterator[FakeBroker]:
    with FakeBroker(**options) as broker:  # type: ignore[arg-type]
        yield broker


def _client(url: str, **options: object) -> Client:
    settings: dict[str, object] = {
        "operation_timeout_seconds": 3,
        "initial_backoff_interval_ms": 20,
        "max_backoff_interval_ms": 100,
    }
    settings.update(options)
    return Client(url, **settings)  # type: ignore[arg-type]


async def _producer(client: Client, **options: object) -> Producer:
    conf = ProducerConfiguration.from_keywords({"batching_enabled": False, **options})
    producer = await client.create_producer(TOPIC, conf)
    assert isinstance(producer, Producer)
    return producer


def _lookup_reply(frame: Frame, url: str, *, redirect: bool, authoritative: bool = False) -> Reply:
    kind = pb.CommandLookupTopicResponse
    return wrap(
        kind(
            request_id=frame.command.lookupTopic.request_id,
            response=kind.Redirect if redirect else kind.Connect,
            brokerServiceUrl=url,
            authoritative=authoritative,
        )
    )


async def test_lookup_follows_redirects_to_the_owner() -> None:
    """SEM-9 / WIRE 3: LOOKUP Redirect means ask that broker; Connect means produce there."""
    with fake_broker() as owner, fake_broker() as front:
        front._handlers[T.LOOKUP] = lambda conn, frame: [
            _lookup_reply(frame, owner.url, redirect=True, authoritative=True)
        ]
        async with _client(front.url) as client:
            producer = await _producer(client)
            await producer.send(OutgoingMessage(b"via redirect"))
        assert owner.frames_of(T.PRODUCER) and not front.frames_of(T.PRODUCER)
        assert owner.frames_of(T.LOOKUP)[0].command.lookupTopic.authoritative
        assert [s.payload for s in owner.sends] == [b"via redirect"]


async def test_lookup_gives_up_after_twenty_redirects() -> None:
    """WIRE 3: more than 20 redirects fail the lookup."""
    with fake_broker() as loop_broker:
        loop_broker._handlers[T.LOOKUP] = lambda conn, frame: [
            _lookup_reply(frame, loop_broker.url, redirect=True)
        ]
        async with _client(loop_broker.url) as client:
            with pytest.raises(errors.LookupError, match="redirected more than 20"):
                await _producer(client)
        assert len(loop_broker.frames_of(T.LOOKUP)) == 21


@contextlib.asynccontextmanager
async def http_lookup_server(broker_url: str, partitions: int) -> AsyncIterator[str]:
    """The two REST endpoints of an HTTP service URL, pointing at `broker_url`."""

    async def lookup(request: web.Request) -> web.Response:
        return web.json_response({"brokerUrl": broker_url, "brokerUrlTls": ""})

    async def partitioned(request: web.Request) -> web.Response:
        assert request.query.get("checkAllowAutoCreation") == "true"
        return web.json_response({"partitions": partitions})

    app = web.Application()
    app.router.add_get("/lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}", lookup)
    app.router.add_get("/admin/v2/{domain}/{tenant}/{ns}/{topic}/partitions", partitioned)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("partitions", [0, 3])
async def test_http_service_url_lookup(partitions: int) -> None:
    """HTTP lookup: /lookup/v2/topic/... and /admin/v2/.../partitions, as the official client."""
    with fake_broker() as broker:
        async with (
            http_lookup_server(broker.url, partitions) as http_url,
            _client(http_url) as client,
        ):
            producer = await client.create_producer(
                TOPIC, ProducerConfiguration(batching_enabled=False)
            )
            if partitions:
                assert isinstance(producer, PartitionedProducer)
                assert producer.num_partitions == partitions
            msg_id = await producer.send(OutgoingMessage(b"over http lookup"))
            assert msg_id.entry_id >= 0
            assert await client.get_topic_partitions(TOPIC) == (
                [f"{TOPIC}-partition-{i}" for i in range(partitions)] if partitions else [TOPIC]
            )
        assert not broker.frames_of(T.LOOKUP)  # the binary protocol was used only to produce
        assert [s.payload for s in broker.sends] == [b"over http lookup"]


async def test_send_timeout_fails_pending_messages() -> None:
    """A receipt that never comes: Timeout after send_timeout_millis, queue emptied."""
    with fake_broker() as broker:
        broker._handlers[T.SEND] = lambda conn, frame: []
        async with _client(broker.url) as client:
            producer = await _producer(client, send_timeout_millis=200)
            started = time.monotonic()
            results = await asyncio.gather(
                producer.send(OutgoingMessage(b"a")),
                producer.send(OutgoingMessage(b"b")),
                return_exceptions=True,
            )
            assert all(isinstance(r, errors.Timeout) for r in results)
            assert 0.15 < time.monotonic() - started < 2
            assert producer.pending_count == 0


def _send_error_once() -> Callable[[FakeConnection, Frame], list[Reply]]:
    failed = threading.Event()

    def handler(conn: FakeConnection, frame: Frame) -> list[Reply]:
        if failed.is_set():
            return conn.broker._on_send(conn, frame)
        failed.set()
        send = frame.command.send
        return [
            wrap(
                pb.CommandSendError(
                    producer_id=send.producer_id,
                    sequence_id=send.sequence_id,
                    error=ServerError.PersistenceError,  # type: ignore[arg-type]
                    message="disk hiccup",
                )
            )
        ]

    return handler


async def test_send_error_reconnects_and_resends() -> None:
    """WIRE 5: after SEND_ERROR the client reconnects and sends the message again."""
    with fake_broker() as broker:
        broker._handlers[T.SEND] = _send_error_once()
        async with _client(broker.url) as client:
            producer = await _producer(client)
            msg_id = await producer.send(OutgoingMessage(b"again"))
            assert msg_id.entry_id >= 0
            assert producer.is_connected()
        assert len(broker.frames_of(T.CONNECT)) == 2
        assert len(broker.frames_of(T.PRODUCER)) == 2
        assert [s.payload for s in broker.sends] == [b"again"]


async def test_broker_close_producer_makes_it_reattach() -> None:
    """CLOSE_PRODUCER from the broker: the producer re-creates itself and goes on."""
    with fake_broker() as broker:

        def close_after_receipt(conn: FakeConnection, frame: Frame) -> list[Reply]:
            replies = conn.broker._on_send(conn, frame)
            if len(conn.broker.sends) == 1:
                producer_id = frame.command.send.producer_id
                replies.append(wrap(pb.CommandCloseProducer(producer_id=producer_id, request_id=0)))
            return replies

        broker._handlers[T.SEND] = close_after_receipt
        async with _client(broker.url) as client:
            producer = await _producer(client, producer_name="sticky")
            await producer.send(OutgoingMessage(b"one"))
            await producer.send(OutgoingMessage(b"two"))
        producers = broker.frames_of(T.PRODUCER)
        assert len(producers) == 2
        assert {f.command.producer.producer_name for f in producers} == {"sticky"}
        assert producers[1].command.producer.epoch == 1
        assert len(broker.frames_of(T.CONNECT)) == 1  # same connection, new registration


def _error_reply(frame: Frame, code: ServerError) -> Reply:
    return wrap(
        pb.CommandError(
            request_id=frame.command.producer.request_id,
            error=code,  # type: ignore[arg-type]
            message=f"scripted {code.name}",
        )
    )


async def test_fatal_create_error_fails_at_once() -> None:
    """WIRE 2: ProducerBusy is not retried; the exception class carries the code."""
    with fake_broker() as broker:
        broker._handlers[T.PRODUCER] = lambda conn, frame: [
            _error_reply(frame, ServerError.ProducerBusy)
        ]
        async with _client(broker.url) as client:
            started = time.monotonic()
            with pytest.raises(errors.ProducerBusy) as caught:
                await _producer(client)
            assert time.monotonic() - started < 1
            assert caught.value.result == errors.Result.ProducerBusy
            assert not caught.value.retriable
        assert len(broker.frames_of(T.PRODUCER)) == 1


async def test_retriable_create_error_is_retried() -> None:
    """WIRE 2: ServiceNotReady is retried (with backoff) until it succeeds."""
    with fake_broker() as broker:
        attempts = []

        def flaky(conn: FakeConnection, frame: Frame) -> list[Reply]:
            attempts.append(frame)
            if len(attempts) < 3:
                return [_error_reply(frame, ServerError.ServiceNotReady)]
            return conn.broker._on_producer(conn, frame)

        broker._handlers[T.PRODUCER] = flaky
        async with _client(broker.url) as client:
            producer = await _producer(client)
            assert producer.is_connected()
        assert len(attempts) == 3


async def test_wait_for_exclusive_waits_for_the_second_producer_success() -> None:
    """WIRE 6: producer_ready=false keeps creation pending until a ready PRODUCER_SUCCESS."""
    with fake_broker() as broker:

        def queued(conn: FakeConnection, frame: Frame) -> list[Reply]:
            request = frame.command.producer
            waiting = pb.CommandProducerSuccess(
                request_id=request.request_id, producer_name="x", producer_ready=False
            )
            ready = conn.broker._on_producer(conn, frame)

            def later() -> None:
                time.sleep(0.3)
                conn.send(*ready)

            threading.Thread(target=later, daemon=True).start()
            return [wrap(waiting)]

        broker._handlers[T.PRODUCER] = queued
        async with _client(broker.url) as client:
            started = time.monotonic()
            producer = await _producer(client, access_mode=ProducerAccessMode.WaitForExclusive)
            assert time.monotonic() - started >= 0.25
            assert producer.is_connected()
        assert broker.frames_of(T.PRODUCER)[0].command.producer.producer_access_mode == 2


async def test_keepalive_drops_a_silent_broker_and_reconnects() -> None:
    """WIRE 16: no answer to PING for a whole interval closes the connection; we reconnect."""
    with fake_broker() as broker:
        broker._handlers[T.PING] = lambda conn, frame: []
        async with _client(broker.url, keepalive_interval_seconds=0.1) as client:
            producer = await _producer(client)
            async with asyncio.timeout(5):
                while len(broker.frames_of(T.CONNECT)) < 2:  # noqa: ASYNC110 (fake broker thread)
                    await asyncio.sleep(0.02)
            assert (await producer.send(OutgoingMessage(b"still here"))).entry_id >= 0
        assert broker.frames_of(T.PING)


async def test_one_connection_per_broker_shared() -> None:
    with fake_broker() as broker:
        async with _client(broker.url) as client:
            first = await _producer(client)
            second = await _producer(client)
            await first.send(OutgoingMessage(b"1"))
            await second.send(OutgoingMessage(b"2"))
        assert len(broker.frames_of(T.CONNECT)) == 1
        assert first.producer_id != second.producer_id


async def test_close_fails_pending_requests_with_a_chained_error() -> None:
    """close() fails what is pending with ConnectError, its __cause__ the reason."""
    with fake_broker() as broker:
        broker._handlers[T.PARTITIONED_METADATA] = lambda conn, frame: []
        cnx = await ClientConnection.open(broker.url.removeprefix("pulsar://"))
        request_id = cnx.new_request_id()
        pending = asyncio.ensure_future(
            cnx.request(
                pb.CommandPartitionedTopicMetadata(topic=TOPIC, request_id=request_id), request_id
            )
        )
        await asyncio.sleep(0.05)
        reason = RuntimeError("shutting down")
        await cnx.close(reason)
        await cnx.close()  # idempotent
        with pytest.raises(errors.ConnectError) as caught:
            await pending
        assert caught.value.__cause__ is reason
        assert cnx.is_closed


async def test_request_without_answer_times_out() -> None:
    with fake_broker() as broker:
        broker._handlers[T.PARTITIONED_METADATA] = lambda conn, frame: []
        cnx = await ClientConnection.open(
            broker.url.removeprefix("pulsar://"), operation_timeout=0.2
        )
        request_id = cnx.new_request_id()
        with pytest.raises(errors.Timeout):
            await cnx.request(
                pb.CommandPartitionedTopicMetadata(topic=TOPIC, request_id=request_id), request_id
            )
        await cnx.close()


async def test_connect_refused_is_a_retriable_connect_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with _client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=0.3) as client:
        with pytest.raises(errors.Timeout) as caught:
            await _producer(client)
        assert isinstance(caught.value.__cause__, errors.ConnectError)


async def test_producer_continues_after_the_brokers_last_sequence_id() -> None:
    """SEM-7.4: PRODUCER_SUCCESS.last_sequence_id is where a named producer goes on."""
    with fake_broker() as broker:

        def known(conn: FakeConnection, frame: Frame) -> list[Reply]:
            replies = conn.broker._on_producer(conn, frame)
            reply = replies[0]
            assert isinstance(reply, pb.BaseCommand)
            reply.producer_success.last_sequence_id = 41
            return replies

        broker._handlers[T.PRODUCER] = known
        async with _client(broker.url) as client:
            producer = await _producer(client, producer_name="returning")
            assert producer.last_sequence_id() == 41
            await producer.send(OutgoingMessage(b"next"))
            assert producer.last_sequence_id() == 42
            explicit = await _producer(client, producer_name="explicit", initial_sequence_id=5)
            assert explicit.last_sequence_id() == 5  # the application's choice wins
        assert [s.frame.command.send.sequence_id for s in broker.sends] == [42]
