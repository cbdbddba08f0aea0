"""Opening consumers: a single-topic Consumer with what SEM-6 adds to it (the
dead letter handler, and with enable_retry the retry consumer on the retry
topic), and a regex subscription's MultiTopicsConsumer (SEM-1)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from magnetar.client.aio.checks import parse_topic
from magnetar.client.aio.config import ConsumerConfiguration
from magnetar.client.aio.consumer.consumer import Consumer
from magnetar.client.aio.consumer.dead_letter import (
    DeadLetterHandler,
    ProducerFactory,
    SubscriptionFactory,
)
from magnetar.client.aio.consumer.multi_topic import MultiTopicsConsumer, SubscribeOne
from magnetar.client.aio.consumer.topic_watcher import Connect
from magnetar.client.aio.enums import RegexSubscriptionMode
from magnetar.client.aio.errors import InvalidConfiguration
from magnetar.client.aio.net.context import ClientContext
from magnetar.proto.naming import TopicName


@dataclass(frozen=True, slots=True)
class ConsumerOpener:
    """What opening a consumer takes from its client."""

    context: ClientContext
    # Registers a consumer with its client and starts it (undone on failure).
    start_endpoint: Callable[[Consumer], Awaitable[None]]
    # The dead letter and retry topics' producer, and their subscription.
    dead_letter_producer: ProducerFactory
    create_subscription: SubscriptionFactory

    async def open(
        self, name: TopicName, subscription: str, conf: ConsumerConfiguration
    ) -> Consumer:
        dead_letter = None
        if conf.dead_letter_policy is not None:
            dead_letter = DeadLetterHandler(
                conf.dead_letter_policy,
                str(name.partitioned_base),
                subscription,
                self.dead_letter_producer,
                self.create_subscription,
            )
        consumer = Consumer(self.context, name, subscription, conf, dead_letter=dead_letter)
        await self.start_endpoint(consumer)
        if conf.enable_retry and dead_letter is not None:
            retry_conf = dataclasses.replace(
                conf,
                enable_retry=False,
                message_listener=None,
                dead_letter_policy=dataclasses.replace(
                    dead_letter.policy, dead_letter_topic=dead_letter.dlq_topic
                ),
            )
            try:
                retry = await self.open(
                    parse_topic(dead_letter.retry_topic), subscription, retry_conf
                )
            except BaseException:
                await consumer.close()
                raise
            retry.dead_letter = dead_letter
            consumer.attach_retry_consumer(retry)
        return consumer


# The topics of a namespace, by regex subscription mode (Client.get_topics_of_namespace).
NamespaceTopics = Callable[[str, RegexSubscriptionMode], Awaitable[list[str]]]


async def open_pattern_consumer(
    pattern: re.Pattern[str],
    subscription: str,
    conf: ConsumerConfiguration,
    namespace_topics: NamespaceTopics,
    subscribe_one: SubscribeOne,
    watch: Connect | None,
) -> MultiTopicsConsumer:
    """SEM-1 regex subscriptions: the namespace's matching topics now, and
    every pattern_auto_discovery_period seconds those that appear (`watch`:
    the connection a topic list watcher uses, when there is one)."""
    without_domain = pattern.pattern.split("://", 1)[-1]
    parts = without_domain.split("/")
    if len(parts) < 3:
        raise InvalidConfiguration(f"the pattern must name tenant/namespace/: {pattern.pattern}")
    namespace = f"{parts[0]}/{parts[1]}"
    regex = re.compile(without_domain)
    mode = conf.regex_subscription_mode

    async def matching() -> list[str]:
        listed = await namespace_topics(namespace, mode)
        return [t for t in listed if regex.fullmatch(_base_without_domain(t))]

    multi = MultiTopicsConsumer(pattern.pattern, subscription, conf)
    await multi.start([parse_topic(t) for t in await matching()], subscribe_one)
    multi.discover(
        matching,
        parse_topic,
        float(conf.pattern_auto_discovery_period),
        None if watch is None else (namespace, watch),
    )
    return multi


def _base_without_domain(topic: str) -> str:
    """A listed topic as a pattern is matched against: no domain, no partition."""
    name = topic.split("://", 1)[-1]
    base, sep, index = name.rpartition("-partition-")
    return base if sep and index.isdigit() else name
