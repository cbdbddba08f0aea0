"""`magnetar produce`, `magnetar consume` and the topic names of every
command, as stand-ins for Pulsar 2.8's pulsar-client and pulsar-admin,
against a real broker: consume's output lines, its options, produce's comma
splitting, key and properties, `topics delete -f`, and short topic names."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.support.brokers import BrokerFactory, BrokerThread
from tests.support.cli import Background, magnetar
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.polling import eventually

BOUNDARY = "----- got message -----"


def _name() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def _stats(broker: BrokerThread, topic: str) -> Any:
    status, stats = http_call(
        "GET", f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/stats"
    )
    assert status == 200, stats
    return stats


def _exists(broker: BrokerThread, topic: str) -> bool:
    path = topic.replace("://", "/")
    return http_call("GET", f"{broker.http_url}/admin/v2/{path}/stats")[0] == 200


def test_consume_prints_key_properties_and_content(broker: BrokerThread) -> None:
    """Each message is `----- got message -----` then `key:[..],
    properties:[k=v, ..], content:..` as pulsar-client 2.8 prints it: the
    key or null, the properties in the message's order ([] when none), the
    payload as UTF-8; the count ends on stderr; the backlog is acknowledged."""
    topic = f"persistent://public/default/{_name()}"
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send("héllo wörld".encode(), properties={"b": "2", "a": "1"}, partition_key="k1")
        producer.send(b"plain")
        producer.close()
    ran = magnetar("consume", topic, "-s", "sub", "-n", "2", "-p", "Earliest", "--url", broker.url)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        BOUNDARY,
        "key:[k1], properties:[b=2, a=1], content:héllo wörld",
        BOUNDARY,
        "key:[null], properties:[], content:plain",
    ]
    assert "2 messages successfully consumed" in ran.stderr
    assert _stats(broker, topic)["subscriptions"]["sub"]["msgBacklog"] == 0


def test_consume_hex(broker: BrokerThread) -> None:
    """--hex prints the content as Commons IO's HexDump (which pulsar-client
    uses): offset, 16 bytes in upper-case hex, the printable characters."""
    topic = f"persistent://public/default/{_name()}"
    payload = b"0123456789abcdef\x00\x01hi"
    with official_client(broker.url) as client:
        client.create_producer(topic).send(payload)
    ran = magnetar("consume", topic, "-s", "s", "-p", "Earliest", "--hex", "--url", broker.url)
    assert ran.returncode == 0, ran.stderr
    row1 = "00000000 " + " ".join(f"{b:02X}" for b in payload[:16]) + " 0123456789abcdef"
    row2 = "00000010 00 01 68 69 " + "   " * 12 + "..hi"
    assert ran.stdout.splitlines() == [
        BOUNDARY,
        f"key:[null], properties:[], content:{row1}",
        row2,
        "",  # the dump ends its line and the line is printed: as pulsar-client
    ]


def test_consume_positions_types_and_until_interrupted(
    broker: BrokerThread, tmp_path: Path
) -> None:
    """-p Earliest (and the older --earliest) start a new subscription at the
    oldest message, -p Latest (the default) after the newest; -t sets the
    subscription type; -n 0 consumes until Ctrl-C, then prints the count."""
    topic = f"persistent://public/default/{_name()}"
    url = ["--url", broker.url]
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"old-1")
        producer.send(b"old-2")
        for args, sub in ((["-p", "Earliest"], "e1"), (["--earliest"], "e2")):
            ran = magnetar("consume", topic, "-s", sub, *args, *url)
            assert ran.returncode == 0, ran.stderr
            assert ran.stdout.splitlines()[1] == "key:[null], properties:[], content:old-1"
        latest = Background(tmp_path, "consume", topic, "-s", "late", "-t", "Key_Shared", *url)
        try:
            eventually(
                "the consumer attached",
                lambda: (
                    "late" in _stats(broker, topic)["subscriptions"]
                    and bool(_stats(broker, topic)["subscriptions"]["late"]["consumers"])
                ),
            )
            assert _stats(broker, topic)["subscriptions"]["late"]["type"] == "Key_Shared"
            producer.send(b"new", partition_key="k")
            assert latest.wait() == 0, latest.stderr
            assert latest.stdout.splitlines() == [
                BOUNDARY,
                "key:[k], properties:[], content:new",
            ]
        finally:
            latest.close()
        forever = Background(
            tmp_path, "consume", topic, "-s", "all", "-n", "0", "-t", "Shared", *url
        )
        try:
            eventually(
                "the consumer attached",
                lambda: bool(
                    _stats(broker, topic)["subscriptions"].get("all", {}).get("consumers")
                ),
            )
            assert _stats(broker, topic)["subscriptions"]["all"]["type"] == "Shared"
            for i in range(3):
                producer.send(f"m{i}".encode())
            forever.wait_for_output(6)
            assert forever.interrupt() == 0, forever.stderr
            assert forever.stdout.splitlines()[1::2] == [
                f"key:[null], properties:[], content:m{i}" for i in range(3)
            ]
            assert "3 messages successfully consumed" in forever.stderr
        finally:
            forever.close()


def test_produce_splits_on_commas_with_key_and_properties(broker: BrokerThread) -> None:
    """-m values are comma-separated lists of messages, sent -n times in
    order; -k is every message's key; -p values are comma-separated
    key=value lists set on every message (checked through a consumer)."""
    topic = f"persistent://public/default/{_name()}"
    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "check")
        ran = magnetar(
            "produce", topic, "-m", "a,b", "-m", "c", "-n", "2", "-k", "key-1",
            "-p", "x=1,y=2", "-p", "z=3", "--url", broker.url,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert "6 messages successfully produced" in ran.stderr
        received = [consumer.receive(timeout_millis=5000) for _ in range(6)]
        assert [m.data() for m in received] == [b"a", b"b", b"c", b"a", b"b", b"c"]
        assert {m.partition_key() for m in received} == {"key-1"}
        assert all(m.properties() == {"x": "1", "y": "2", "z": "3"} for m in received)
        # Without -k and -p: no key, no properties.
        ran = magnetar("produce", topic, "-m", "bare", "--url", broker.url)
        assert ran.returncode == 0 and "1 messages successfully produced" in ran.stderr
        message = consumer.receive(timeout_millis=5000)
        assert (message.data(), message.partition_key(), message.properties()) == (b"bare", "", {})
    ran = magnetar("produce", topic, "-m", "x", "-p", "novalue", "--url", broker.url)
    assert ran.returncode == 2 and "not key=value" in ran.stderr


def test_delete_refused_while_in_use_and_force_accepted(broker: BrokerThread) -> None:
    """`topics delete` of a topic with an attached consumer is refused (exit
    1, the broker's reason); `delete -f` sends force=true, which the broker
    accepts: an unused topic is deleted with it."""
    topic = f"persistent://public/default/{_name()}"
    admin = ["admin", "--admin-url", broker.http_url]
    with official_client(broker.url) as client:
        client.subscribe(topic, "attached")
        ran = magnetar(*admin, "topics", "delete", topic)
        assert ran.returncode == 1 and "412" in ran.stderr, ran.stderr
        assert _exists(broker, topic)
    idle = f"persistent://public/default/{_name()}"
    assert magnetar(*admin, "topics", "create", idle).returncode == 0
    ran = magnetar(*admin, "topics", "delete", "-f", idle)
    assert ran.returncode == 0, ran.stderr
    assert not _exists(broker, idle)


def test_delete_force_removes_a_topic_in_use(broker_factory: BrokerFactory) -> None:
    """As in Pulsar 2.8: `topics delete` refuses a topic with connected
    clients; `topics delete -f` closes its producers and consumers and
    deletes it. (Automatic creation off: the closed clients' reconnects must
    not create it again.)"""
    broker = broker_factory(allow_auto_topic_creation=False)
    topic = f"persistent://public/default/{_name()}"
    admin = ["admin", "--admin-url", broker.http_url]
    assert magnetar(*admin, "topics", "create", topic).returncode == 0
    with official_client(broker.url) as client:
        client.subscribe(topic, "attached")
        client.create_producer(topic)
        refused = magnetar(*admin, "topics", "delete", topic)
        assert refused.returncode == 1 and "connected producers or consumers" in refused.stderr
        assert _exists(broker, topic)
        ran = magnetar(*admin, "topics", "delete", "-f", topic)
        assert ran.returncode == 0, ran.stderr
        assert not _exists(broker, topic)
        # Coming back the way the closed clients do does not create it again.
        with pytest.raises(pulsar.TopicNotFound):
            client.subscribe(topic, "attached")
        assert not _exists(broker, topic)


def test_short_topic_names_everywhere(broker: BrokerThread) -> None:
    """`name` means persistent://public/default/name and `tenant/ns/name`
    persistent://tenant/ns/name for the admin's topic commands, produce,
    consume, perf and peek; a name of two parts is bad usage (exit 2)."""
    name = _name()
    full = f"persistent://public/default/{name}"
    admin = ["admin", "--admin-url", broker.http_url]
    url = ["--url", broker.url]
    assert magnetar(*admin, "topics", "create", name).returncode == 0
    assert _exists(broker, full)
    ran = magnetar(*admin, "topics", "create-subscription", f"public/default/{name}", "-s", "s")
    assert ran.returncode == 0, ran.stderr
    ran = magnetar("produce", name, "-m", "one,two", *url)
    assert ran.returncode == 0, ran.stderr
    ran = magnetar(*admin, "--json", "topics", "stats", name)
    assert ran.returncode == 0 and json.loads(ran.stdout)["subscriptions"]["s"]["msgBacklog"] == 2
    ran = magnetar(
        *admin, "topics", "peek-messages", f"public/default/{name}", "-s", "s", "-n", "2"
    )
    assert [line.split(": ", 1)[1] for line in ran.stdout.splitlines()] == ["one", "two"]
    ran = magnetar("consume", f"public/default/{name}", "-s", "s", "-n", "2", *url)
    assert ran.returncode == 0 and "content:two" in ran.stdout, ran.stderr
    ran = magnetar("perf", "produce", name, "--rate", "0", "-m", "5", "--interval", "60", *url)
    assert ran.returncode == 0, ran.stderr
    assert _stats(broker, full)["subscriptions"]["s"]["msgBacklog"] == 5
    ran = magnetar("perf", "consume", name, "-s", "s", "-m", "5", "--interval", "60", *url)
    assert ran.returncode == 0, ran.stderr
    # The full name is taken unchanged; the short one named the same topic.
    ran = magnetar(*admin, "--json", "topics", "stats", full)
    assert json.loads(ran.stdout)["subscriptions"]["s"]["msgBacklog"] == 0
    assert magnetar(*admin, "topics", "delete", name).returncode == 0
    assert not _exists(broker, full)
    for command in (["produce", "a/b", "-m", "x"], ["consume", "a/b", "-s", "s"]):
        ran = magnetar(*command, *url)
        assert ran.returncode == 2 and "tenant/namespace/topic" in ran.stderr, ran.stderr
    ran = magnetar(*admin, "topics", "stats", "a/b")
    assert ran.returncode == 2 and "tenant/namespace/topic" in ran.stderr, ran.stderr
