"""Per-topic permissions, expire to a message id and the partitioned-topic
calls (issue 43), through a real broker with the official client: Pulsar's
paths, statuses and JSON."""

from __future__ import annotations

import uuid
from pathlib import Path

import jwt
import pulsar
import pytest

from tests.support.brokers import BrokerFactory, BrokerThread, token_auth
from tests.support.http_calls import http_call
from tests.support.official import official_client

SECRET = b"t" * 32


def _topic(namespace: str = "public/default") -> tuple[str, str]:
    """A fresh persistent topic name and its admin path."""
    local = f"x-{uuid.uuid4().hex[:8]}"
    return f"persistent://{namespace}/{local}", f"persistent/{namespace}/{local}"


def _token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


def test_topic_permissions_grant_get_revoke(broker: BrokerThread) -> None:
    """Pulsar's topic permissions: POST /permissions/{role} with a list of
    actions (204), GET answers the namespace's grants united with the
    topic's, stored in the policies' auth_policies.destination_auth; DELETE
    removes the topic grant (204) and is 412 "Permissions are not set at the
    topic level" when there is none; an unknown topic is 404, a bad body 400."""
    ns = f"public/perm-{uuid.uuid4().hex[:6]}"
    admin = f"{broker.http_url}/admin/v2"
    assert http_call("PUT", f"{admin}/namespaces/{ns}") == (204, None)
    assert http_call("POST", f"{admin}/namespaces/{ns}/permissions/nsrole", ["consume"])[0] == 204
    name, path = _topic(ns)
    assert http_call("PUT", f"{admin}/{path}") == (204, None)
    url = f"{admin}/{path}/permissions"
    assert http_call("GET", url) == (200, {"nsrole": ["consume"]})
    assert http_call("POST", f"{url}/tina", ["produce"]) == (204, None)
    assert http_call("POST", f"{url}/nsrole", ["produce"]) == (204, None)
    assert http_call("GET", url) == (
        200,
        {"nsrole": ["consume", "produce"], "tina": ["produce"]},
    )
    policies = http_call("GET", f"{admin}/namespaces/{ns}")[1]
    assert policies["auth_policies"]["destination_auth"] == {
        name: {"tina": ["produce"], "nsrole": ["produce"]}
    }
    assert http_call("DELETE", f"{url}/tina") == (204, None)
    status, body = http_call("DELETE", f"{url}/tina")
    assert (status, body["reason"]) == (412, "Permissions are not set at the topic level")
    assert http_call("GET", url) == (200, {"nsrole": ["consume", "produce"]})
    assert http_call("POST", f"{url}/tina", ["fly"])[0] == 400
    assert http_call("GET", f"{admin}/persistent/{ns}/never-made/permissions")[0] == 404


def test_a_topic_grant_lets_a_role_produce_on_that_topic_only(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """Pulsar's authorization reads topic grants: a role granted produce on
    one topic (and nothing in the namespace) produces there with the
    official client, and is refused on another topic of the namespace."""
    broker = broker_factory(
        **token_auth(tmp_path, SECRET, authorization_enabled=True, superuser_roles="root")
    )
    granted, path = _topic()
    other, _ = _topic()
    admin = f"{broker.http_url}/admin/v2/{path}"
    root = _token("root")
    assert http_call("PUT", admin, token=root) == (204, None)
    assert http_call("POST", f"{admin}/permissions/tina", ["produce"], token=root)[0] == 204
    auth = pulsar.AuthenticationToken(_token("tina"))
    with official_client(broker.url, authentication=auth) as client:
        client.create_producer(granted).send(b"allowed")
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(other)


def _send(client: pulsar.Client, topic: str, count: int) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(count)]
    producer.close()
    return ids


def _backlog(broker: BrokerThread, path: str, sub: str) -> int:
    status, stats = http_call("GET", f"{broker.http_url}/admin/v2/{path}/stats")
    assert status == 200
    return int(stats["subscriptions"][sub]["msgBacklog"])


def test_expire_messages_up_to_a_message_id(broker: BrokerThread) -> None:
    """Pulsar's POST subscription/{sub}/expireMessages with a ResetCursorData
    body acknowledges every message up to that id (204); with isExcluded the
    id itself stays; an id at or before the mark-delete position changes
    nothing; a bad body is 400, an unknown subscription 404."""
    name, path = _topic()
    url = f"{broker.http_url}/admin/v2/{path}/subscription/s/expireMessages"
    with official_client(broker.url) as client:
        client.subscribe(name, "s").close()
        ids = _send(client, name, 5)
    assert _backlog(broker, path, "s") == 5

    def body(i: int, **extra: object) -> dict[str, object]:
        return {"ledgerId": ids[i].ledger_id(), "entryId": ids[i].entry_id(), **extra}

    assert http_call("POST", url, body(2, isExcluded=True)) == (204, None)
    assert _backlog(broker, path, "s") == 3
    assert http_call("POST", url, body(2)) == (204, None)
    assert _backlog(broker, path, "s") == 2
    assert http_call("POST", url, body(0)) == (204, None)
    assert _backlog(broker, path, "s") == 2
    assert http_call("POST", url, {"ledgerId": "x"})[0] == 400
    missing = url.replace("/subscription/s/", "/subscription/nope/")
    assert http_call("POST", missing, body(1))[0] == 404


def test_terminate_partitions(broker: BrokerThread) -> None:
    """Pulsar's POST terminate/partitions: every partition terminated, the
    answer a map of partition index to its last message id; producing is
    then refused; a non-partitioned topic is 405 with Pulsar's reason."""
    name, path = _topic()
    admin = f"{broker.http_url}/admin/v2/{path}"
    assert http_call("PUT", f"{admin}/partitions", 2) == (204, None)
    with official_client(broker.url) as client:
        for i in range(2):
            _send(client, f"{name}-partition-{i}", i + 1)
        status, body = http_call("POST", f"{admin}/terminate/partitions")
        assert status == 200 and set(body) == {"0", "1"}
        for i in range(2):
            assert body[str(i)]["partitionIndex"] == i
            assert body[str(i)]["entryId"] == i  # partition i holds i + 1 entries
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(f"{name}-partition-0").send(b"late")
    _plain, plain_path = _topic()
    assert http_call("PUT", f"{broker.http_url}/admin/v2/{plain_path}") == (204, None)
    status, body = http_call(
        "POST", f"{broker.http_url}/admin/v2/{plain_path}/terminate/partitions"
    )
    assert status == 405 and "partitioned-terminate" in body["reason"]


def test_create_missed_partitions_and_partitioned_internal_stats(broker: BrokerThread) -> None:
    """Pulsar's POST createMissedPartitions creates the partitions not
    created yet (204); GET partitioned-internalStats answers
    PartitionedManagedLedgerInfo: {"metadata": {"partitions": N},
    "partitions": {name: internalStats}}; both are 404 on a topic that is
    not partitioned."""
    name, path = _topic()
    admin = f"{broker.http_url}/admin/v2"
    assert http_call("PUT", f"{admin}/{path}/partitions", 3) == (204, None)
    with official_client(broker.url) as client:
        _send(client, f"{name}-partition-0", 2)
    partitions = [f"{name}-partition-{i}" for i in range(3)]
    listed = set(http_call("GET", f"{admin}/persistent/public/default")[1])
    assert partitions[0] in listed and partitions[1] not in listed
    assert http_call("POST", f"{admin}/{path}/createMissedPartitions") == (204, None)
    listed = set(http_call("GET", f"{admin}/persistent/public/default")[1])
    assert set(partitions) <= listed
    status, body = http_call("GET", f"{admin}/{path}/partitioned-internalStats")
    assert status == 200 and body["metadata"] == {"partitions": 3}
    assert set(body["partitions"]) == set(partitions)
    assert body["partitions"][partitions[0]]["numberOfEntries"] == 2
    assert body["partitions"][partitions[2]]["numberOfEntries"] == 0
    _plain, plain_path = _topic()
    assert http_call("PUT", f"{admin}/{plain_path}") == (204, None)
    assert http_call("POST", f"{admin}/{plain_path}/createMissedPartitions")[0] == 404
    assert http_call("GET", f"{admin}/{plain_path}/partitioned-internalStats")[0] == 404
