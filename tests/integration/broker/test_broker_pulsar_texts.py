"""Pulsar's own words where clients and scripts match on them (issue 44):
the CONNECT refusal, the admin's 409 texts, the exclusive-producer refusals;
and the admin's explicit topic creation where automatic creation is off."""

from __future__ import annotations

import uuid
from pathlib import Path

import jwt
import pulsar
import pytest

from magnetar.proto import pulsar_api_pb2 as pb
from tests.support.brokers import BrokerFactory, BrokerThread, token_auth
from tests.support.http_calls import http_call
from tests.support.official import official_client
from tests.support.raw_client import RawClient

T = pb.BaseCommand
SECRET = b"s" * 32


def _topic() -> str:
    return f"persistent://public/default/texts-{uuid.uuid4().hex[:8]}"


def _admin(broker: BrokerThread, method: str, path: str, body: object = None) -> tuple[int, str]:
    status, answer = http_call(method, f"{broker.http_url}/admin/v2/{path}", body)
    reason = answer.get("reason", "") if isinstance(answer, dict) else ""
    return status, reason


def test_a_refused_connect_says_unable_to_authenticate(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """SEM 10 / WIRE: a CONNECT with a bad token gets AuthenticationError with
    Pulsar's text "Unable to authenticate" (pulsar-flex's suite matches it),
    then the close; a good token still connects."""
    broker = broker_factory(**token_auth(tmp_path, SECRET))
    good = jwt.encode({"sub": "admin"}, SECRET, algorithm="HS256")
    for credentials in (good + "wrong", "not-a-token"):
        with RawClient.for_broker(broker) as raw:
            raw.send_connect(protocol_version=17, token=credentials)
            frames = raw.wait_closed()
            errors = [f.command.error for f in frames if f.type == T.ERROR]
            assert [(e.error, e.message) for e in errors] == [
                (pb.ServerError.AuthenticationError, "Unable to authenticate")
            ]
    with official_client(broker.url, authentication=pulsar.AuthenticationToken(good)) as client:
        client.create_producer(_topic()).send(b"ok")


def test_admin_creates_topics_where_automatic_creation_is_off(
    broker_factory: BrokerFactory,
) -> None:
    """SEM 1 (topic creation): with allow_auto_topic_creation off, a client
    cannot create a topic by using it, but the admin's PUT creates it (as
    Pulsar's admin does), and clients then use it."""
    broker = broker_factory(allow_auto_topic_creation=False)
    topic, other = _topic(), _topic()
    path = topic.replace("persistent://", "persistent/")
    with official_client(broker.url) as client:
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(topic)
        assert _admin(broker, "PUT", path) == (204, "")
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "s")
        producer.send(b"after the admin")
        assert consumer.receive(timeout_millis=5000).data() == b"after the admin"
        # Creation by use stays off for every other topic.
        with pytest.raises(pulsar.TopicNotFound):
            client.subscribe(other, "s")
    status, reason = _admin(broker, "PUT", f"{path}/subscription/s2")
    assert status == 204, reason


def test_conflicts_answer_pulsars_409_texts(broker: BrokerThread) -> None:
    """Pulsar's 409 texts, which scripts match to tolerate leftovers: topic,
    subscription, partitioned topic, namespace, tenant."""
    topic = _topic()
    path = topic.replace("persistent://", "persistent/")
    assert _admin(broker, "PUT", path)[0] == 204
    assert _admin(broker, "PUT", path) == (409, "This topic already exists")
    assert _admin(broker, "PUT", f"{path}/subscription/sub")[0] == 204
    status, reason = _admin(broker, "PUT", f"{path}/subscription/sub")
    assert status == 409 and reason.startswith("Subscription already exists for topic"), reason
    assert _admin(broker, "PUT", f"{path}-p/partitions", 2)[0] == 204
    assert _admin(broker, "PUT", f"{path}-p/partitions", 2) == (
        409,
        "Partitioned topic already exists",
    )
    status, reason = _admin(broker, "PUT", f"{path}-p")
    assert status == 409 and reason.startswith("This topic already exists"), reason
    assert _admin(broker, "PUT", "namespaces/public/default") == (409, "Namespace already exists")
    assert _admin(broker, "PUT", "tenants/public", {"allowedClusters": []}) == (
        409,
        "Tenant already exists",
    )


def _producer_error(
    raw: RawClient, topic: str, producer_id: int, mode: pb.ProducerAccessMode.ValueType
) -> pb.CommandError:
    raw.send(
        pb.CommandProducer(
            topic=topic,
            producer_id=producer_id,
            request_id=raw.request_id(),
            producer_access_mode=mode,
        )
    )
    frame = raw.expect(T.ERROR)
    return frame.command.error


def test_exclusive_producer_refusals_say_what_pulsar_says(broker: BrokerThread) -> None:
    """WIRE 6: an exclusive producer refused beside shared ones, and any
    producer beside an exclusive one, with Pulsar's texts and codes."""
    shared_topic, exclusive_topic = _topic(), _topic()
    with RawClient.for_broker(broker) as raw:
        raw.connect()
        raw.create_producer(shared_topic, producer_id=1)
        refused = _producer_error(raw, shared_topic, 2, pb.ProducerAccessMode.Exclusive)
        assert (refused.error, refused.message) == (
            pb.ServerError.ProducerFenced,
            "Topic has existing shared producers",
        )
        raw.send(
            pb.CommandProducer(
                topic=exclusive_topic,
                producer_id=3,
                request_id=raw.request_id(),
                producer_name="the-owner",
                producer_access_mode=pb.ProducerAccessMode.Exclusive,
            )
        )
        raw.expect(T.PRODUCER_SUCCESS)
        for producer_id, mode, code in (
            (4, pb.ProducerAccessMode.Exclusive, pb.ServerError.ProducerFenced),
            (5, pb.ProducerAccessMode.Shared, pb.ServerError.ProducerBusy),
        ):
            refused = _producer_error(raw, exclusive_topic, producer_id, mode)
            assert (refused.error, refused.message) == (
                code,
                "Topic has an existing exclusive producer: the-owner",
            )
