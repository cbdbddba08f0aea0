"""Arguments the official client refuses are refused here the same way: a
ValueError naming the argument, before anything is sent (SEM-1: the
official keywords, with their types). The client below points at a port
nothing listens on; no check needs a broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import magnetar.client as ours

URL = "pulsar://127.0.0.1:9"  # discard port: never dialled by these checks


@pytest.fixture(scope="module")
def client() -> Iterator[ours.Client]:
    c = ours.Client(URL)
    yield c
    c.close()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"authentication": "token"},
        {"operation_timeout_seconds": "30"},
        {"io_threads": "1"},
        {"use_tls": "yes"},
        {"tls_trust_certs_file_path": 5},
        {"listener_name": 5},
    ],
    ids=lambda kw: next(iter(kw)),
)
def test_client_keywords_of_the_wrong_type(kwargs: dict[str, Any]) -> None:
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=name):
        ours.Client(URL, **kwargs)


def test_a_malformed_service_url_is_a_value_error_and_an_invalid_url() -> None:
    with pytest.raises(ours.InvalidUrl) as caught:
        ours.Client("fakeServiceUrl")
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda c: c.create_producer(None), "topic"),
        (lambda c: c.create_producer("t", producer_name=5), "producer_name"),
        (lambda c: c.create_producer("t", send_timeout_millis="1"), "send_timeout_millis"),
        (lambda c: c.create_producer("t", compression_type=None), "compression_type"),
        (lambda c: c.create_producer("t", block_if_queue_full="x"), "block_if_queue_full"),
        (lambda c: c.create_producer("t", properties=[("a", "b")]), "properties"),
        (lambda c: c.subscribe(None, "s"), "topic"),
        (lambda c: c.subscribe("t", None), "subscription_name"),
        (lambda c: c.subscribe("t", "s", consumer_type=None), "consumer_type"),
        (lambda c: c.subscribe("t", "s", receiver_queue_size="9"), "receiver_queue_size"),
        (lambda c: c.subscribe("t", "s", consumer_name=5), "consumer_name"),
        (lambda c: c.create_reader(None, ours.MessageId.earliest), "topic"),
        (lambda c: c.create_reader("t", None), "start_message_id"),
        (lambda c: c.create_reader("t", ours.MessageId.earliest, reader_name=5), "reader_name"),
        (lambda c: c.create_table_view(5), "topic"),
    ],
)
def test_endpoint_keywords_of_the_wrong_type(
    client: ours.Client, call: Callable[[ours.Client], object], name: str
) -> None:
    with pytest.raises(ValueError, match=name):
        call(client)


def test_batching_with_chunking_and_bad_policies_are_value_errors(client: ours.Client) -> None:
    with pytest.raises(ValueError, match=r"[Cc]hunking"):
        client.create_producer("t", batching_enabled=True, chunking_enabled=True)
    with pytest.raises(ValueError, match="max_redeliver_count"):
        ours.ConsumerDeadLetterPolicy(-1)
    with pytest.raises(ValueError, match="sticky_ranges"):
        ours.ConsumerKeySharedPolicy(ours.KeySharedMode.Sticky)
    for ranges in ([(0, 65536)], [(0, 100), (50, 150)], [(10, 5)]):
        with pytest.raises(ValueError, match="sticky range"):
            ours.ConsumerKeySharedPolicy(ours.KeySharedMode.Sticky, sticky_ranges=ranges)
    policy = ours.ConsumerKeySharedPolicy(
        ours.KeySharedMode.Sticky, sticky_ranges=[(0, 100), (101, 65535)]
    )
    assert policy.sticky_ranges == [(0, 100), (101, 65535)]
    assert ours.ConsumerDeadLetterPolicy(3).dead_letter_topic == ""
