"""Admin v2 message lookups over HTTP against a real broker, with messages
from the official client: lastMessageId, ledger/{l}/entry/{e}, examinemessage,
messageid/{timestamp} and the subscription peek, with Pulsar's statuses,
JSON and X-Pulsar-* headers."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime
from email.message import Message

import pulsar

from magnetar.client.aio.compression import decompress
from magnetar.proto import messages, pulsar_api_pb2 as pb
from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client


def _names(broker: BrokerThread, domain: str = "persistent") -> tuple[str, str]:
    """(topic, its admin URL) for a fresh topic."""
    local = f"msgs-{uuid.uuid4().hex[:8]}"
    return (
        f"{domain}://public/default/{local}",
        f"{broker.http_url}/admin/v2/{domain}/public/default/{local}",
    )


def _get(url: str) -> tuple[int, Message, bytes]:
    """GET with the answer's headers too (http_call keeps only the JSON body)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def _ms(header: str) -> int:
    """Pulsar's DateFormatter text (ISO 8601 with an offset) in ms."""
    return round(datetime.fromisoformat(header).timestamp() * 1000)


def _id(msg_id: pulsar.MessageId) -> str:
    return f"{msg_id.ledger_id()}:{msg_id.entry_id()}"


def test_last_message_id(broker: BrokerThread) -> None:
    """Pulsar's getLastMessageId: 404 for a missing topic; entryId -1 while
    empty; MessageIdImpl JSON (ledgerId, entryId, partitionIndex) for a
    single message; BatchMessageIdImpl's batchIndex (the last index) for a
    batch; a partition's index; 405 on a non-persistent topic."""
    topic, url = _names(broker)
    status, body = http_call("GET", f"{url}/lastMessageId")
    assert status == 404 and body["reason"]
    assert http_call("PUT", url) == (204, None)
    status, body = http_call("GET", f"{url}/lastMessageId")
    assert status == 200 and body["entryId"] == -1 and body["partitionIndex"] == -1
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [producer.send(f"m{i}".encode()) for i in range(3)]
        status, body = http_call("GET", f"{url}/lastMessageId")
        assert (status, body) == (
            200,
            {
                "ledgerId": sent[-1].ledger_id(),
                "entryId": sent[-1].entry_id(),
                "partitionIndex": -1,
            },
        )
        batcher = client.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=1000
        )
        for i in range(3):
            batcher.send_async(f"b{i}".encode(), None)
        batcher.flush()
        status, body = http_call("GET", f"{url}/lastMessageId")
        assert status == 200 and body["batchIndex"] == 2
        assert body["entryId"] == sent[-1].entry_id() + 1

        partitioned, purl = _names(broker)
        assert http_call("PUT", f"{purl}/partitions", 2) == (204, None)
        client.create_producer(f"{partitioned}-partition-1").send(b"p")
        status, body = http_call("GET", f"{purl}-partition-1/lastMessageId")
        assert status == 200 and body["partitionIndex"] == 1 and body["entryId"] == 0

        np_topic, np_url = _names(broker, "non-persistent")
        client.create_producer(np_topic)
        status, body = http_call("GET", f"{np_url}/lastMessageId")
        assert status == 405 and body["reason"]


def test_get_message_by_id(broker: BrokerThread) -> None:
    """Pulsar's getMessageById: the entry's payload with its metadata in
    X-Pulsar-* headers (properties, key, producer, sequence id, publish and
    event times as ISO 8601 text, not encrypted, no batch headers for a
    single message); 404 for a position with no entry, for ids that are not
    numbers (no such route) and for a missing topic."""
    topic, url = _names(broker)
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False, producer_name="p-one")
        producer.send(b"first")
        sent = producer.send(
            b"second", properties={"color": "blue"}, partition_key="k2", event_timestamp=1234567
        )
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        published = [reader.read_next(10_000).publish_timestamp() for _ in range(2)]
    status, headers, body = _get(f"{url}/ledger/{sent.ledger_id()}/entry/{sent.entry_id()}")
    assert (status, body) == (200, b"second")
    assert headers["X-Pulsar-Message-ID"] == _id(sent)
    assert headers["X-Pulsar-PROPERTY-color"] == "blue"
    assert headers["X-Pulsar-partition-key"] == "k2"
    assert headers["X-Pulsar-producer-name"] == "p-one"
    assert headers["X-Pulsar-sequence-id"] == "1"
    assert _ms(headers["X-Pulsar-publish-time"]) == published[1]
    assert _ms(headers["X-Pulsar-event-time"]) == 1234567
    assert headers["X-Pulsar-Is-Encrypted"] == "false"
    assert headers["X-Pulsar-num-batch-message"] is None
    assert headers["Content-Type"] == "application/octet-stream"
    status, _, body = _get(f"{url}/ledger/{sent.ledger_id()}/entry/{sent.entry_id() - 1}")
    assert (status, body) == (200, b"first")
    status, body = http_call("GET", f"{url}/ledger/{sent.ledger_id()}/entry/99")
    assert status == 404 and body["reason"] == "Message id not found"
    assert http_call("GET", f"{url}/ledger/{sent.ledger_id() + 7}/entry/0")[0] == 404
    assert http_call("GET", f"{url}/ledger/x/entry/0")[0] == 404
    _, missing = _names(broker)
    assert http_call("GET", f"{missing}/ledger/1/entry/0")[0] == 404


def test_examine_message(broker: BrokerThread) -> None:
    """Pulsar's examineMessage counts entries from either end (1-based;
    latest and 1 by default; below 1 counts as 1); a batch is one entry,
    examined whole with X-Pulsar-num-batch-message, and a compressed one
    says its codec and size. 412 on an empty topic, 405 on a partitioned
    topic's base name and on a non-persistent topic; beyond the end is 404."""
    topic, url = _names(broker)
    assert http_call("PUT", url) == (204, None)
    status, body = http_call("GET", f"{url}/examinemessage?initialPosition=earliest")
    assert status == 412 and "total message is zero" in body["reason"]
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [producer.send(f"m{i}".encode()) for i in range(4)]
        batcher = client.create_producer(
            topic,
            compression_type=pulsar.CompressionType.LZ4,
            batching_enabled=True,
            batching_max_publish_delay_ms=1000,
        )
        for i in range(3):
            batcher.send_async(f"b{i}".encode(), None, partition_key=f"k{i}")
        batcher.flush()

        def examine(query: str) -> tuple[int, Message, bytes]:
            return _get(f"{url}/examinemessage?{query}")

        for query, expected in (
            ("initialPosition=earliest&messagePosition=1", 0),
            ("initialPosition=earliest&messagePosition=3", 2),
            ("initialPosition=earliest&messagePosition=0", 0),
            ("initialPosition=latest&messagePosition=2", 3),
            ("initialPosition=latest&messagePosition=5", 0),
        ):
            status, headers, body = examine(query)
            assert (status, body) == (200, f"m{expected}".encode()), query
            assert headers["X-Pulsar-Message-ID"] == _id(sent[expected])
        # The batch is the newest entry: latest, position 1 (the defaults).
        status, headers, body = examine("")
        assert status == 200 and headers["X-Pulsar-num-batch-message"] == "3"
        assert headers["X-Pulsar-Message-ID"].endswith(f":{sent[-1].entry_id() + 1}")
        assert headers["X-Pulsar-compression"] == "LZ4"
        # Pulsar's batch-size: the entry less its metadata (checksum block included).
        assert int(headers["X-Pulsar-batch-size"]) == len(body) + 10
        plain = decompress(pb.CompressionType.LZ4, body, int(headers["X-Pulsar-uncompressed-size"]))
        batch = messages.split_batch(plain, 3)
        assert [b for _, b in batch] == [b"b0", b"b1", b"b2"]
        assert [messages.partition_key(m) for m, _ in batch] == ["k0", "k1", "k2"]
        status, body_json = http_call("GET", f"{url}/examinemessage?messagePosition=6")
        assert status == 404 and body_json["reason"]
        assert http_call("GET", f"{url}/examinemessage?messagePosition=x")[0] == 400

        partitioned, purl = _names(broker)
        assert http_call("PUT", f"{purl}/partitions", 2) == (204, None)
        status, body_json = http_call("GET", f"{purl}/examinemessage")
        assert status == 405 and "partitioned topic" in body_json["reason"]
        client.create_producer(f"{partitioned}-partition-0").send(b"p0")
        status, _, body = _get(f"{purl}-partition-0/examinemessage")
        assert (status, body) == (200, b"p0")

        np_topic, np_url = _names(broker, "non-persistent")
        client.create_producer(np_topic)
        assert http_call("GET", f"{np_url}/examinemessage")[0] == 405


def test_message_id_by_timestamp(broker: BrokerThread) -> None:
    """Pulsar's getMessageIdByTimestamp: the first message published at or
    after the time, as MessageIdImpl JSON; 404 ("Message ID not found") when
    every message is older or the topic is empty; 405 on a partitioned
    topic's base name."""
    topic, url = _names(broker)
    assert http_call("PUT", url) == (204, None)
    status, body = http_call("GET", f"{url}/messageid/0")
    assert status == 404 and body["reason"] == "Message ID not found"
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        sent = []
        for i in range(4):
            sent.append(producer.send(f"m{i}".encode()))
            time.sleep(0.02)  # distinct publish times
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        times = [reader.read_next(10_000).publish_timestamp() for _ in range(4)]
    assert times == sorted(set(times))

    def at(timestamp: int) -> tuple[int, object]:
        return http_call("GET", f"{url}/messageid/{timestamp}")

    def expected(i: int) -> dict[str, int]:
        return {
            "ledgerId": sent[i].ledger_id(),
            "entryId": sent[i].entry_id(),
            "partitionIndex": -1,
        }

    assert at(0) == (200, expected(0))
    assert at(times[2]) == (200, expected(2))
    assert at(times[1] + 1) == (200, expected(2))
    assert at(times[3]) == (200, expected(3))
    assert at(times[3] + 1)[0] == 404
    assert http_call("GET", f"{url}/messageid/soon")[0] == 404
    _, purl = _names(broker)
    assert http_call("PUT", f"{purl}/partitions", 2) == (204, None)
    status, body = http_call("GET", f"{purl}/messageid/0")
    assert status == 405 and "partitioned topic" in body["reason"]


def test_peek_answers_in_pulsar_format(broker: BrokerThread) -> None:
    """Pulsar's peekNthMessage answers like the other lookups: the n-th
    unacknowledged entry with Pulsar's headers (batch headers only for a
    batch); 405 on a partitioned topic's base name."""
    topic, url = _names(broker)
    sub = f"{url}/subscription/s"
    assert http_call("PUT", sub, {"ledgerId": -1, "entryId": -1}) == (204, None)
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        sent = producer.send(b"one", partition_key="k")
        batcher = client.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=1000
        )
        for i in range(2):
            batcher.send_async(f"b{i}".encode(), None)
        batcher.flush()
    status, headers, body = _get(f"{sub}/position/1")
    assert (status, body) == (200, b"one")
    assert headers["X-Pulsar-Message-ID"] == _id(sent)
    assert headers["X-Pulsar-partition-key"] == "k"
    assert headers["X-Pulsar-num-batch-message"] is None
    status, headers, body = _get(f"{sub}/position/2")
    assert status == 200 and headers["X-Pulsar-num-batch-message"] == "2"
    assert [b for _, b in messages.split_batch(body, 2)] == [b"b0", b"b1"]
    assert http_call("GET", f"{sub}/position/3")[0] == 404
    _, purl = _names(broker)
    assert http_call("PUT", f"{purl}/partitions", 2) == (204, None)
    status, body_json = http_call("GET", f"{purl}/subscription/s/position/1")
    assert status == 405 and "partitioned topic" in body_json["reason"]
