"""Plain counters behind the broker's rates and metrics.

The publish and dispatch paths only add to integer fields (no lock, no
label lookup, no call); the periodic stats update (observability/stats_update.py) turns
the totals into per-second rates, and the metrics collector and the admin
stats read both.
"""

from __future__ import annotations

from typing import Literal


class RateCounter:
    """Messages and bytes since the owner was loaded, and the rates over the
    last stats interval."""

    __slots__ = ("_bytes_then", "_messages_then", "byte_rate", "bytes", "messages", "msg_rate")

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        self.msg_rate = 0.0
        self.byte_rate = 0.0
        self._messages_then = 0
        self._bytes_then = 0

    def add(self, messages: int, size: int) -> None:
        self.messages += messages
        self.bytes += size

    def update(self, seconds: float) -> None:
        """Close one interval of `seconds`: the rates become what was counted in it."""
        if seconds <= 0:
            return
        messages, size = self.messages, self.bytes
        self.msg_rate = (messages - self._messages_then) / seconds
        self.byte_rate = (size - self._bytes_then) / seconds
        self._messages_then, self._bytes_then = messages, size

    def set_totals(self, messages: int, size: int) -> None:
        """Follow totals counted elsewhere (storage counts its own writes)."""
        self.messages, self.bytes = messages, size


def rate_stats(
    counter: RateCounter, way: Literal["In", "Out"], *, totals: bool = True
) -> dict[str, float | int]:
    """A counter as Pulsar's stats fields of one direction: msgRate<way> and
    msgThroughput<way> (the last interval's rates) and, with `totals`,
    msg<way>Counter and bytes<way>Counter."""
    fields: dict[str, float | int] = {
        f"msgRate{way}": counter.msg_rate,
        f"msgThroughput{way}": counter.byte_rate,
    }
    if totals:
        fields[f"msg{way}Counter"] = counter.messages
        fields[f"bytes{way}Counter"] = counter.bytes
    return fields
