"""Namespace and topic properties over the admin REST API (issue 43), through
a real broker: Pulsar's paths, statuses and bodies, the merge of a PUT, the
errors, and that the properties are stored (they survive a restart)."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid

from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _raw_call(method: str, url: str) -> tuple[int, str]:
    """One request whose answer is plain text: Pulsar writes a String entity
    raw (not as JSON), so http_call's JSON decoding does not apply."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _new_namespace(broker: BrokerThread) -> str:
    """A fresh namespace of tenant `public`; its admin URL."""
    url = f"{broker.http_url}/admin/v2/namespaces/public/{_name('ns')}"
    assert http_call("PUT", url) == (204, None)
    return url


def _new_topic(broker: BrokerThread, *, partitions: int = 0) -> str:
    """A fresh persistent topic in public/default (partitioned when asked);
    its admin URL."""
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{_name('props')}"
    if partitions:
        assert http_call("PUT", f"{url}/partitions", partitions) == (204, None)
    else:
        assert http_call("PUT", url) == (204, None)
    return url


def test_namespace_properties_set_merge_get_clear(broker: BrokerThread) -> None:
    """Pulsar's namespace properties: GET answers {} before any is set; PUT
    /properties merges the body into the stored map (putAll: new keys added,
    given keys replaced, others kept); DELETE /properties clears them all;
    each write answers 204. They are the Policies field `properties`."""
    ns = _new_namespace(broker)
    assert http_call("GET", f"{ns}/properties") == (200, {})
    assert http_call("PUT", f"{ns}/properties", {"a": "1", "b": "2"}) == (204, None)
    assert http_call("PUT", f"{ns}/properties", {"b": "20", "c": "3"}) == (204, None)
    assert http_call("GET", f"{ns}/properties") == (200, {"a": "1", "b": "20", "c": "3"})
    assert http_call("GET", ns)[1]["properties"] == {"a": "1", "b": "20", "c": "3"}
    assert http_call("PUT", f"{ns}/properties", {}) == (204, None)
    assert http_call("GET", f"{ns}/properties") == (200, {"a": "1", "b": "20", "c": "3"})
    assert http_call("DELETE", f"{ns}/properties") == (204, None)
    assert http_call("GET", f"{ns}/properties") == (200, {})


def test_namespace_single_property(broker: BrokerThread) -> None:
    """Pulsar's per-key calls: PUT /property/{key}/{value} sets one key (204)
    beside the others; GET /property/{key} answers the value as a plain
    String entity (raw text), and 204 with no body when the key is not set
    (the Java admin client's null); DELETE /property/{key} answers the
    value it removed, or 204 when there was none."""
    ns = _new_namespace(broker)
    assert http_call("PUT", f"{ns}/properties", {"keep": "k"}) == (204, None)
    assert _raw_call("PUT", f"{ns}/property/color/blue") == (204, "")
    assert _raw_call("GET", f"{ns}/property/color") == (200, "blue")
    assert _raw_call("PUT", f"{ns}/property/color/red") == (204, "")
    assert _raw_call("GET", f"{ns}/property/color") == (200, "red")
    assert http_call("GET", f"{ns}/properties") == (200, {"keep": "k", "color": "red"})
    assert _raw_call("GET", f"{ns}/property/missing") == (204, "")
    assert _raw_call("DELETE", f"{ns}/property/color") == (200, "red")
    assert _raw_call("DELETE", f"{ns}/property/color") == (204, "")
    assert _raw_call("GET", f"{ns}/property/color") == (204, "")
    assert http_call("GET", f"{ns}/properties") == (200, {"keep": "k"})


def test_namespace_properties_errors(broker: BrokerThread) -> None:
    """A namespace that does not exist is 404 with {"reason": ...} for every
    call, as Pulsar's "Namespace does not exist"; a body that is not a JSON
    object of strings (Pulsar's Map<String, String>) is 400, never 500, and
    changes nothing."""
    missing = f"{broker.http_url}/admin/v2/namespaces/public/{_name('none')}"
    for method, path, body in (
        ("GET", "properties", None),
        ("PUT", "properties", {"a": "1"}),
        ("DELETE", "properties", None),
        ("GET", "property/a", None),
        ("PUT", "property/a/1", None),
        ("DELETE", "property/a", None),
    ):
        status, answer = http_call(method, f"{missing}/{path}", body)
        assert status == 404, (method, path)
        assert "does not exist" in answer["reason"]

    ns = _new_namespace(broker)
    assert http_call("PUT", f"{ns}/properties", {"a": "1"}) == (204, None)
    for bad in (["a", "1"], "a=1", 7, {"n": 1}, {"n": None}, {"o": {"x": "y"}}):
        status, answer = http_call("PUT", f"{ns}/properties", bad)
        assert status == 400, bad
        assert answer["reason"]
    status, answer = http_call("PUT", f"{ns}/properties")  # no body at all
    assert status == 400 and answer["reason"]
    request = urllib.request.Request(f"{ns}/properties", data=b"{not json", method="PUT")
    try:
        urllib.request.urlopen(request, timeout=10)
        raise AssertionError("malformed JSON was accepted")
    except urllib.error.HTTPError as exc:
        assert exc.code == 400
    assert http_call("GET", f"{ns}/properties") == (200, {"a": "1"})


def test_topic_properties_set_merge_get_remove(broker: BrokerThread) -> None:
    """Pulsar's topic properties: GET answers {} for a topic without any;
    PUT merges the body in (204); an empty body changes nothing (Pulsar
    ignores it); DELETE ?key=k removes one key (204, also when it is not
    set). Each topic has its own."""
    topic = _new_topic(broker)
    other = _new_topic(broker)
    assert http_call("GET", f"{topic}/properties") == (200, {})
    assert http_call("PUT", f"{topic}/properties", {"a": "1", "b": "2"}) == (204, None)
    assert http_call("PUT", f"{topic}/properties", {"b": "20", "c": "3"}) == (204, None)
    assert http_call("PUT", f"{topic}/properties", {}) == (204, None)
    assert http_call("PUT", f"{topic}/properties") == (204, None)
    assert http_call("GET", f"{topic}/properties") == (200, {"a": "1", "b": "20", "c": "3"})
    assert http_call("DELETE", f"{topic}/properties?key=b") == (204, None)
    assert http_call("DELETE", f"{topic}/properties?key=never-set") == (204, None)
    assert http_call("GET", f"{topic}/properties") == (200, {"a": "1", "c": "3"})
    assert http_call("GET", f"{other}/properties") == (200, {})


def test_partitioned_topic_properties(broker: BrokerThread) -> None:
    """A partitioned topic's properties are set and read on its base name
    (Pulsar keeps them in the partitioned metadata), without loading a
    stray topic of that name; a partition within the count is a topic that
    exists, one past it is not (404)."""
    topic = _new_topic(broker, partitions=2)
    assert http_call("GET", f"{topic}/properties") == (200, {})
    assert http_call("PUT", f"{topic}/properties", {"tier": "gold"}) == (204, None)
    assert http_call("GET", f"{topic}/properties") == (200, {"tier": "gold"})
    assert http_call("GET", f"{topic}-partition-1/properties")[0] == 200
    assert http_call("GET", f"{topic}-partition-2/properties")[0] == 404
    assert http_call("DELETE", f"{topic}/properties?key=tier") == (204, None)
    assert http_call("GET", f"{topic}/properties") == (200, {})
    assert broker.server is not None and broker.server.service is not None
    name = topic.split("/admin/v2/", 1)[1].replace("persistent/", "persistent://", 1)
    assert name not in broker.server.service.topics


def test_topic_properties_errors(broker: BrokerThread) -> None:
    """A topic that does not exist is 404 ("Topic not found" in Pulsar),
    also in a namespace that does not exist, for GET, PUT and DELETE; a bad
    body is 400 with a reason; DELETE without `key` is 400."""
    base = f"{broker.http_url}/admin/v2/persistent"
    for url in (f"{base}/public/default/{_name('none')}", f"{base}/public/{_name('no')}/t"):
        for method, path, body in (
            ("GET", "properties", None),
            ("PUT", "properties", {"a": "1"}),
            ("DELETE", "properties?key=a", None),
        ):
            status, answer = http_call(method, f"{url}/{path}", body)
            assert status == 404, (method, url)
            assert answer["reason"]
    topic = _new_topic(broker)
    for bad in ([1], "x", {"n": 2}, {"b": True}):
        status, answer = http_call("PUT", f"{topic}/properties", bad)
        assert status == 400, bad
        assert answer["reason"]
    status, answer = http_call("DELETE", f"{topic}/properties")
    assert status == 400 and "key" in answer["reason"]
    assert http_call("GET", f"{topic}/properties") == (200, {})


def test_properties_survive_a_restart(broker: BrokerThread) -> None:
    """Properties are stored, not kept in memory: after the broker restarts
    on the same data, the namespace's, a topic's and a partitioned topic's
    properties answer as before (Pulsar keeps them in the metadata store and
    the managed ledger)."""
    ns = _new_namespace(broker)
    topic = _new_topic(broker)
    partitioned = _new_topic(broker, partitions=2)
    assert http_call("PUT", f"{ns}/properties", {"owner": "team-a"}) == (204, None)
    assert _raw_call("PUT", f"{ns}/property/env/prod") == (204, "")
    assert http_call("PUT", f"{topic}/properties", {"schema": "v2"}) == (204, None)
    assert http_call("PUT", f"{partitioned}/properties", {"tier": "gold"}) == (204, None)
    old_http = broker.http_url
    broker.restart()
    ns, topic, partitioned = (
        u.replace(old_http, broker.http_url) for u in (ns, topic, partitioned)
    )
    assert http_call("GET", f"{ns}/properties") == (200, {"owner": "team-a", "env": "prod"})
    assert _raw_call("GET", f"{ns}/property/env") == (200, "prod")
    assert http_call("GET", f"{topic}/properties") == (200, {"schema": "v2"})
    assert http_call("GET", f"{partitioned}/properties") == (200, {"tier": "gold"})
