"""LOOKUP by listener name in cluster mode (issue 28.5): a broker answers
with the owner's advertised listener the client named, as standalone does."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.proto import pulsar_api_pb2 as pb
from tests.integration.cluster.cluster_support import ClusterBroker
from tests.support.etcd import (
    EtcdServer,
    etcd,  # noqa: F401  (a fixture: a real etcd server)
)
from tests.support.raw_client import RawClient

pytestmark = [pytest.mark.slow]

T = pb.BaseCommand
LookupType = pb.CommandLookupTopicResponse


def _lookup(
    port: int, topic: str, listener: str, authoritative: bool = False
) -> pb.CommandLookupTopicResponse:
    with RawClient("127.0.0.1", port) as client:
        client.connect()
        client.send(
            pb.CommandLookupTopic(
                topic=topic,
                request_id=1,
                authoritative=authoritative,
                advertised_listener_name=listener,
            )
        )
        return client.expect(T.LOOKUP_RESPONSE).command.lookupTopicResponse


def test_lookup_answers_the_owners_listener_by_name(
    etcd: EtcdServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    brokers: list[ClusterBroker] = []
    try:
        for i in range(2):
            broker = ClusterBroker(
                etcd.url, tmp_path / "data", tmp_path / f"b{i}.log", cluster_lease_seconds=2
            )
            # The same port under another name: what a client outside would dial.
            broker.env["MAGNETAR_ADVERTISED_LISTENERS"] = (
                f"external:pulsar://localhost:{broker.port}"
            )
            brokers.append(broker.start())
        external = {f"pulsar://localhost:{b.port}" for b in brokers}
        seen: set[str] = set()
        for n in range(16):
            topic = f"persistent://public/default/listener-{n}"
            answer = _lookup(brokers[0].port, topic, "external")
            assert answer.response in (LookupType.Connect, LookupType.Redirect), answer
            assert answer.brokerServiceUrl in external, answer
            if answer.response == LookupType.Redirect:
                # The owner (or the one the load manager picked) answers too.
                port = int(answer.brokerServiceUrl.rsplit(":", 1)[1])
                again = _lookup(port, topic, "external", authoritative=True)
                assert again.response == LookupType.Connect, again
                assert again.brokerServiceUrl == answer.brokerServiceUrl
            seen.add(answer.brokerServiceUrl)
            # Without a name: the default URL.
            plain = _lookup(brokers[0].port, topic, "")
            assert plain.brokerServiceUrl.startswith("pulsar://127.0.0.1:"), plain
        assert seen
        unknown = _lookup(brokers[0].port, "persistent://public/default/listener-0", "nope")
        assert unknown.response == LookupType.Failed
        assert unknown.error == pb.ServerError.ServiceNotReady
        assert "nope" in unknown.message
    finally:
        for broker in brokers:
            broker.stop()
