"""Topics loaded on a PARTITIONED_METADATA or LOOKUP, ahead of the PRODUCER or
SUBSCRIBE that follows.

The official clients ask PARTITIONED_METADATA, then LOOKUP, then attach, one
round trip after the other. A new topic's load (its ledger and topic built,
its policies applied) took most of the broker's time for the three (issue
43: about 125 of 195 us in the PRODUCER); started once the first answer is
written (a topic that is not partitioned), it runs while the client reads
it and asks the next.

Neither request creates a topic, in Pulsar or here: a new topic loaded this way
keeps its ledger's record back (HoldsFirstRecord), is not
among the broker's topics, and is dropped, leaving nothing stored, unless a
request that may create it comes (a PRODUCER, a SUBSCRIBE with
force_topic_creation, an admin's create) before HOLD_S. A request that may
not create it (a SUBSCRIBE without force_topic_creation, an admin's read)
drops it and finds no topic, as without the prefetch. An existing topic
loaded this way is simply loaded.

At start a standalone broker loads and drops a few such topics (warm_up),
so that its first client's topic does not pay for the interpreter's first
runs of the load.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, cast

import structlog

from magnetar.broker.eager import start_eagerly
from magnetar.broker.topics.base import Topic, is_persistent
from magnetar.proto.naming import TopicName

log = structlog.get_logger(__name__)

# How long a new topic loaded ahead waits for its first client.
HOLD_S = 5.0
# At most this many wait at once (a client that looks up and never attaches).
MAX_HELD = 1000
# New topics loaded and dropped at start (warm_up), and where.
WARM_UP_LOADS = 8
WARM_UP_NAMESPACE = "public/default"
WARM_UP_PREFIX = "__magnetar-warm-up-"


class HoldsFirstRecord(Protocol):
    """A managed ledger that can keep a new ledger's record back (the file
    engine's: storage/births.py)."""

    def hold_first_record(self) -> bool: ...
    def release_first_record(self) -> None: ...


@dataclass(slots=True)
class Held:
    """A new topic loaded ahead, not created yet."""

    topic: Topic
    # The policy changes counted when its load started: any change since
    # (auto-creation turned off, say) and it is loaded again instead.
    changes: int
    expiry: asyncio.TimerHandle


class TopicPrefetch:
    """The topics of lookups loaded ahead; owned by the broker service."""

    def __init__(
        self,
        load: Callable[[TopicName], Awaitable[Topic | None]],
        changes: Callable[[], int],
    ) -> None:
        # Loads the topic: None when it was existing and is now loaded as
        # any other, the topic (its record held) when it is new.
        self._load = load
        self._changes = changes
        self._loading: dict[str, asyncio.Task[None]] = {}
        self._held: dict[str, Held] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False
        self.warmed = 0  # topics loaded and dropped by warm_up

    def start(self, name: TopicName) -> None:
        key = str(name)
        if self._closed or key in self._held or key in self._loading:
            return
        if len(self._held) + len(self._loading) >= MAX_HELD:
            return
        started = start_eagerly(self._run(name, key))
        if isinstance(started, asyncio.Task):
            self._loading[key] = started
            started.add_done_callback(lambda _t: self._loading.pop(key, None))

    async def _run(self, name: TopicName, key: str) -> None:
        changes = self._changes()
        try:
            topic = await self._load(name)
        except Exception as exc:  # the client's own request says why
            log.debug("topic not loaded ahead", topic=key, error=repr(exc))
            return
        if topic is None:
            return
        if self._closed:
            self._drop(topic)
            return
        expiry = asyncio.get_running_loop().call_later(HOLD_S, self._expire, key)
        self._held[key] = Held(topic, changes, expiry)

    async def warm_up(self) -> None:
        """Load WARM_UP_LOADS new topics ahead and drop them, nothing of them
        stored (at start, before any client). Python 3.11 specializes a
        function's bytecode only after its first runs: a fresh broker loaded
        its first topic in 520-570 us, its fifth in 200 (issue 43), and its
        first client waited for that. Stops at the first topic refused (no
        such namespace, no automatic creation) or existing."""
        for i in range(WARM_UP_LOADS):
            name = TopicName.parse(f"persistent://{WARM_UP_NAMESPACE}/{WARM_UP_PREFIX}{i}")
            try:
                topic = await self._load(name)
            except Exception as exc:
                log.debug("warm-up stopped", topic=str(name), error=repr(exc))
                return
            if topic is None:
                return
            await topic.close(notify_clients=False)
            self.warmed += 1

    async def wait(self, key: str) -> None:
        """Until a load of `key` under way is over."""
        task = self._loading.get(key)
        if task is not None:
            await asyncio.shield(task)

    async def take(self, key: str, may_create: bool) -> Topic | None:
        """The held topic of `key` for a request that creates it when
        `may_create` (its record is then released); else, or when policies
        changed since, it is closed (before the request loads the topic
        anew) and None returned."""
        held = self._held.pop(key, None)
        if held is None:
            return None
        held.expiry.cancel()
        if not may_create or held.changes != self._changes() or self._closed:
            await held.topic.close(notify_clients=False)
            return None
        if (ledger := _holding_ledger(held.topic)) is not None:
            ledger.release_first_record()
        return held.topic

    def _expire(self, key: str) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            held.expiry.cancel()
            self._drop(held.topic)

    def _drop(self, topic: Topic) -> None:
        """Close it: its ledger's record was never stored, so nothing is left."""
        task = asyncio.get_running_loop().create_task(topic.close(notify_clients=False))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Idempotent: loads under way cancelled, held topics closed."""
        self._closed = True
        for task in list(self._loading.values()):
            task.cancel()
        await asyncio.gather(*self._loading.values(), return_exceptions=True)
        for key in list(self._held):
            self._expire(key)
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


def hold_first_record(topic: Topic) -> bool:
    """Keep a new topic's ledger record back (False: not new, or its engine
    cannot): the topic is then held, not created."""
    ledger = _holding_ledger(topic)
    return ledger is not None and ledger.hold_first_record()


def _holding_ledger(topic: Topic) -> HoldsFirstRecord | None:
    ledger = topic.ledger if is_persistent(topic) else None
    # An attribute test: isinstance against a runtime Protocol walks its
    # members on every call (tens of microseconds).
    return cast(HoldsFirstRecord, ledger) if hasattr(ledger, "hold_first_record") else None
