"""What LOOKUP answers, and the seam a cluster plugs its bundle ownership
into (a standalone broker has none: it owns every topic)."""

from __future__ import annotations

from typing import NamedTuple, Protocol

from magnetar.proto.naming import TopicName


class LookupAnswer(NamedTuple):
    """Connect to these URLs, or (`redirect`) ask the broker there again."""

    url: str
    url_tls: str
    redirect: bool = False


class Ownership(Protocol):
    """Which broker serves a topic (cluster mode)."""

    async def lookup(
        self, name: TopicName, authoritative: bool, listener_name: str = ""
    ) -> LookupAnswer:
        """Connect here when this broker owns the topic's bundle, redirect to
        the owner otherwise; an unowned bundle is assigned first. The URLs are
        those of the listener named (advertised_listeners), if any."""

    async def check_owner(self, name: TopicName) -> None:
        """ServiceNotReadyError unless this broker owns the topic's bundle."""

    def still_owns(self, name: TopicName) -> bool:
        """Whether the ownership checked before loading still holds (no
        release or session loss since)."""

    async def served_elsewhere(self, name: TopicName) -> str | None:
        """The web service URL of the broker serving `name` when that is
        another broker, None when it is this one (an unowned bundle is
        taken here, as an authoritative lookup does)."""
