"""End-to-end encryption through our client (issue 26, item 3), with the
official client on the other side of the same topic on our broker: a
message encrypted by either client is decrypted by the other (RSA key
files, AES-GCM payload, compressed and batched too), and a consumer that
cannot decrypt applies crypto_failure_action (FAIL keeps the message back,
DISCARD drops it, CONSUME hands out the encrypted payload with its
EncryptionContext)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pulsar
import pytest

import magnetar.client as ours
from tests.support.brokers import BrokerThread
from tests.support.certs import rsa_key_pair

_names = itertools.count()
KEY_NAME = "app-key"


def _topic() -> str:
    return f"persistent://public/default/crypto-{next(_names)}"


@pytest.fixture
def keys(tmp_path: Path) -> tuple[str, str]:
    return rsa_key_pair(tmp_path, "right")


def _official(url: str) -> pulsar.Client:
    return pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


@pytest.mark.parametrize("batched", [False, True])
def test_each_client_decrypts_what_the_other_encrypted(
    magnetar_broker: BrokerThread, keys: tuple[str, str], batched: bool
) -> None:
    """Messages from both producers (LZ4, batched or not) reach a consumer of
    each client in plain text; the broker stored only ciphertext (a consumer
    without keys, CONSUME, sees no plain text)."""
    topic = _topic()
    mine, theirs = ours.Client(magnetar_broker.url), _official(magnetar_broker.url)
    try:
        our_reader, their_reader = ours.CryptoKeyReader(*keys), pulsar.CryptoKeyReader(*keys)
        our_consumer = mine.subscribe(topic, "ours", crypto_key_reader=our_reader)
        their_consumer = theirs.subscribe(topic, "theirs", crypto_key_reader=their_reader)
        blind = mine.subscribe(
            topic, "blind", crypto_failure_action=ours.ConsumerCryptoFailureAction.CONSUME
        )
        options = {
            "encryption_key": KEY_NAME,
            "compression_type": pulsar.CompressionType.LZ4,
            "batching_enabled": batched,
        }
        our_producer = mine.create_producer(topic, crypto_key_reader=our_reader, **options)
        their_producer = theirs.create_producer(topic, crypto_key_reader=their_reader, **options)
        for i in range(3):
            our_producer.send_async(b"ours-%d" % i, None)
        our_producer.flush()
        for i in range(3):
            their_producer.send_async(b"theirs-%d" % i, None)
        their_producer.flush()
        want = [b"ours-0", b"ours-1", b"ours-2", b"theirs-0", b"theirs-1", b"theirs-2"]
        assert [our_consumer.receive(5000).data() for _ in want] == want
        assert [their_consumer.receive(5000).data() for _ in want] == want
        opaque = blind.receive(5000)
        context = opaque.encryption_context()
        assert context is not None and context.is_decryption_failed()
        assert [k.key for k in context.keys()] == [KEY_NAME]  # noqa: SIM118 (a method)
        assert b"ours" not in opaque.data()
    finally:
        mine.close()
        theirs.close()


def test_a_consumer_without_the_key_applies_its_failure_action(
    magnetar_broker: BrokerThread, keys: tuple[str, str], tmp_path: Path
) -> None:
    """The official client encrypts; our consumer holding another private key
    cannot decrypt: FAIL delivers nothing (the message stays for a consumer
    that can), DISCARD acknowledges it away, CONSUME delivers the ciphertext
    with is_decryption_failed(); the right key then reads what FAIL kept."""
    topic = _topic()
    wrong = ours.CryptoKeyReader(*rsa_key_pair(tmp_path, "wrong"))
    theirs = _official(magnetar_broker.url)
    mine = ours.Client(magnetar_broker.url)
    try:
        kept = mine.subscribe(topic, "kept", crypto_key_reader=wrong)
        dropped = mine.subscribe(
            topic,
            "dropped",
            crypto_key_reader=wrong,
            crypto_failure_action=ours.ConsumerCryptoFailureAction.DISCARD,
        )
        opaque = mine.subscribe(
            topic,
            "opaque",
            crypto_key_reader=wrong,
            crypto_failure_action=ours.ConsumerCryptoFailureAction.CONSUME,
        )
        producer = theirs.create_producer(
            topic, encryption_key=KEY_NAME, crypto_key_reader=pulsar.CryptoKeyReader(*keys)
        )
        producer.send(b"secret")
        with pytest.raises(ours.Timeout):
            kept.receive(500)
        with pytest.raises(ours.Timeout):
            dropped.receive(500)
        got = opaque.receive(5000)
        assert got.data() != b"secret"
        context = got.encryption_context()
        assert context is not None and context.is_decryption_failed()
        assert context.batch_size() == -1 and len(context.param()) == 12
        kept.close()
        dropped.close()
        right = ours.CryptoKeyReader(*keys)
        assert mine.subscribe(topic, "kept", crypto_key_reader=right).receive(5000).data() == (
            b"secret"
        )
        after = mine.subscribe(topic, "dropped", crypto_key_reader=right)
        with pytest.raises(ours.Timeout):
            after.receive(500)  # DISCARD acknowledged it
    finally:
        mine.close()
        theirs.close()
