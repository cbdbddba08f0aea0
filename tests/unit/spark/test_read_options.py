"""The Spark source's read options (issue 14): topics_pattern forms,
starting_time and its bad combinations, fail_on_data_loss and subscription
values, each error naming its option; and the data-loss rule on positions."""

from __future__ import annotations

import pytest

from magnetar.client import RegexSubscriptionMode
from magnetar.spark_connector.data_loss import DataLossCheck, DataLossError, follows
from magnetar.spark_connector.options import OptionError
from magnetar.spark_connector.read_options import ReadOptions, TopicsPattern

URL = {"service_url": "pulsar://127.0.0.1:6650"}


def test_topics_pattern_forms() -> None:
    """SEM-1 topics_pattern: a regex over one namespace's topic names."""
    full = TopicsPattern.parse("persistent://acme/orders/eu-.*")
    assert (full.namespace, full.regex.pattern) == ("acme/orders", "eu-.*")
    assert full.mode == RegexSubscriptionMode.PersistentOnly
    assert TopicsPattern.parse("acme/orders/eu-.*").namespace == "acme/orders"
    bare = TopicsPattern.parse("eu-.*")
    assert bare.namespace == "public/default"
    assert (
        TopicsPattern.parse("non-persistent://a/b/x").mode
        == RegexSubscriptionMode.NonPersistentOnly
    )
    assert full.matches("persistent://acme/orders/eu-1-partition-3")
    assert full.matches("persistent://acme/orders/eu-2")
    assert not full.matches("persistent://acme/orders/us-1")
    assert not TopicsPattern.parse("acme/orders/eu").matches("persistent://acme/orders/eu-1")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topics_pattern": "persistent://acme/x("}, "topics_pattern"),
        ({"topics_pattern": "persistent://only-tenant"}, "topics_pattern"),
        ({"topics_pattern": "kafka://a/b/c"}, "topics_pattern"),
        ({"topic": "t", "topics_pattern": "x"}, "exactly one of the options"),
        ({"topic": "t", "starting_time": "soon"}, "starting_time"),
        ({"topic": "t", "starting_time": "-5"}, "starting_time"),
        (
            {"topic": "t", "starting_time": "5", "starting_offsets": "latest"},
            "starting_time and starting_offsets",
        ),
        ({"topic": "t", "fail_on_data_loss": "maybe"}, "fail_on_data_loss"),
        ({"topic": "t", "subscription": " "}, "subscription"),
        ({"topic": "t", "max_messages_per_trigger": "0"}, "max_messages_per_trigger"),
        ({"topic": "t", "reader.start_message_id": "x"}, r"reader\.start_message_id"),
        ({"topic": "t", "reader.receiver_queue_size": "many"}, "receiver_queue_size"),
    ],
)
def test_bad_read_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        ReadOptions.parse({**URL, **options})


def test_good_read_options() -> None:
    parsed = ReadOptions.parse(
        {**URL, "topics_pattern": "eu-.*", "starting_time": "1700000000000",
         "fail_on_data_loss": "False", "subscription": "etl"}
    )  # fmt: skip
    assert parsed.pattern is not None and parsed.topics == []
    assert parsed.starting_time == 1_700_000_000_000
    assert parsed.fail_on_data_loss is False and parsed.subscription == "etl"
    assert ReadOptions.parse({**URL, "topic": "t"}).fail_on_data_loss is True
    passed = ReadOptions.parse(
        {**URL, "topic": "t", "reader.receiver_queue_size": "50", "reader.reader_name": "etl"}
    )
    assert passed.reader == {"receiver_queue_size": 50, "reader_name": "etl"}


def test_data_loss_rule_on_positions() -> None:
    """SEM-5.4: ledgers are deleted whole, from the front."""
    assert follows([3, 7, -1], [3, 8, -1]) and follows([3, 7, 2], [3, 7, 3])
    assert not follows([3, 7, -1], [3, 9, -1]) and not follows([3, 7, -1], [4, 0, -1])
    check = DataLossCheck(fail=True)
    assert not check.lost("p", [3, 7, -1], [3, 0, -1], [3, 9, -1])  # still stored
    assert not check.lost("p", [3, 7, -1], [3, 8, -1], [3, 9, -1])  # the next one
    assert not check.lost("p", [3, 7, -1], [4, 0, -1], [4, 3, -1], acknowledged=[3, 7, -1])
    assert not check.lost("p", [3, 7, -1], None, [3, 7, -1])  # nothing came after it
    with pytest.raises(DataLossError, match="fail_on_data_loss"):
        check.lost("p", [3, 7, -1], [4, 0, -1], [4, 3, -1])
    with pytest.raises(DataLossError, match="partition p"):
        check.lost("p", [3, 7, -1], None, [4, 3, -1])
    assert DataLossCheck(fail=False).lost("p", [3, 7, -1], [5, 0, -1], [5, 1, -1])
