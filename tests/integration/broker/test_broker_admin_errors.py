"""Admin REST error answers not covered elsewhere: deleting topics in use
(412), terminate of an unknown topic (404), namespace permissions listed and
bad grants refused (400), all with Pulsar's {"reason": ...} body."""

from __future__ import annotations

import uuid

from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client


def test_deleting_topics_in_use_is_refused(broker: BrokerThread) -> None:
    topic = f"persistent://public/default/inuse-{uuid.uuid4().hex[:6]}"
    url = f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}"
    assert http_call("PUT", f"{url}-p/partitions", 2) == (204, None)
    with official_client(broker.url) as client:
        producer = client.create_producer(topic)
        partitioned = client.create_producer(f"{topic}-p")
        status, body = http_call("DELETE", url)
        assert status == 412 and "producers or consumers" in body["reason"]
        status, body = http_call("DELETE", f"{url}-p/partitions")
        assert status == 412 and "producers or consumers" in body["reason"]
        producer.close()
        partitioned.close()
    assert http_call("DELETE", url) == (204, None)
    assert http_call("DELETE", f"{url}-p/partitions") == (204, None)
    status, body = http_call("POST", f"{url}-gone/terminate")
    assert status == 404 and "does not exist" in body["reason"]


def test_namespace_permissions_listed_and_checked(broker: BrokerThread) -> None:
    ns = f"perm-{uuid.uuid4().hex[:6]}"
    base = f"{broker.http_url}/admin/v2/namespaces/public/{ns}"
    assert http_call("PUT", base) == (204, None)
    assert http_call("POST", f"{base}/permissions/app", ["produce", "consume"]) == (204, None)
    status, grants = http_call("GET", f"{base}/permissions")
    assert status == 200 and sorted(grants["app"]) == ["consume", "produce"]
    status, body = http_call("POST", f"{base}/permissions/app", ["fly"])
    assert status == 400 and "actions" in body["reason"]
    status, body = http_call("POST", f"{base}/permissions/app", "produce")
    assert status == 400
    assert http_call("DELETE", f"{base}/permissions/app") == (204, None)
    assert http_call("GET", f"{base}/permissions") == (200, {})
