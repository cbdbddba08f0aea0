"""What producers and consumers need from the connection they live on.

ServerCnx implements it; unit tests use a small recording implementation, so
topics, subscriptions and dispatchers never import the network layer.
"""

from __future__ import annotations

from typing import Protocol


class ClientConnection(Protocol):
    @property
    def address(self) -> str:
        """The peer's address, for logs and stats."""
        ...

    @property
    def client_version(self) -> str:
        """What the client said it is in CONNECT, for stats."""
        ...

    @property
    def is_writable(self) -> bool:
        """False while the socket's write buffer is above its high-water mark."""
        ...

    def write_frames(self, frames: list[bytes]) -> None:
        """Queue encoded frames (or their parts, in order) for the socket:
        those of one loop turn (the receipts and MESSAGEs of one group commit)
        leave in one socket write, after anything queued before them and
        before anything after (no-op once closed)."""
        ...

    def publish_completed(self, size: int, count: int = 1) -> None:
        """`count` in-flight publishes of `size` bytes in all got their receipt or error."""
        ...

    def producer_closed_by_broker(self, producer_id: int) -> None:
        """Tell the client its producer is closed (it will reconnect) and forget it."""
        ...

    def consumer_closed_by_broker(self, consumer_id: int) -> None:
        """Tell the client its consumer is closed (it will resubscribe) and forget it."""
        ...

    def active_consumer_changed(self, consumer_id: int, is_active: bool) -> None:
        """Failover: tell a consumer whether it is now the active one."""
        ...

    def reached_end_of_topic(self, consumer_id: int) -> None:
        """The consumer read everything of a terminated topic; told only to a
        client that handles it (WIRE 4: never unsolicited)."""
        ...
