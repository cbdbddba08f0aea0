"""Argument checks with the official client's outcome: a ValueError naming
the argument, raised before anything reaches the loop or the wire; and the
ack-timeout rule a consumer configuration is checked against (SEM-1)."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from magnetar.client.aio.crypto import CryptoKeyReader
from magnetar.client.aio.errors import InvalidConfiguration, InvalidTopicName
from magnetar.proto.naming import InvalidTopicName as _BadName, TopicName


def check_type(expected: type | tuple[type, ...], value: Any, name: str) -> None:
    if not isinstance(value, expected):
        raise ValueError(
            f"argument {name} must be of type {_names(expected)}, not {type(value).__name__}"
        )


def check_optional(expected: type | tuple[type, ...], value: Any, name: str) -> None:
    if value is not None and not isinstance(value, expected):
        raise ValueError(
            f"argument {name} must be None or of type {_names(expected)}, "
            f"not {type(value).__name__}"
        )


def _names(expected: type | tuple[type, ...]) -> str:
    kinds = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join(kind.__name__ for kind in kinds)


def check_enum(kind: type[IntEnum], value: Any, name: str) -> None:
    """One of `kind`'s members, or a value that converts to one (the
    official module's enums do)."""
    try:
        kind(int(value))
    except (TypeError, ValueError):
        raise ValueError(f"argument {name} must be a {kind.__name__}, not {value!r}") from None


def parse_topic(topic: str) -> TopicName:
    """A topic name argument; InvalidTopicName (a ValueError) when it is not one."""
    try:
        return TopicName.parse(topic)
    except _BadName as exc:
        raise InvalidTopicName(str(exc)) from exc


def check_key_reader(reader: object) -> None:
    if reader is not None and not isinstance(reader, CryptoKeyReader):
        raise ValueError("crypto_key_reader must be a magnetar.client.CryptoKeyReader")


MIN_ACK_TIMEOUT = 1.0


def check_ack_timeout(ack_timeout: float, tick_time: float) -> None:
    """SEM-1: an ack timeout, when set, is >= 1 s and no shorter than its tick."""
    if ack_timeout <= 0:
        return
    if ack_timeout < MIN_ACK_TIMEOUT:
        raise InvalidConfiguration(
            f"ack timeout must be at least {MIN_ACK_TIMEOUT:g} s (got {ack_timeout:g} s)"
        )
    if tick_time <= 0 or tick_time > ack_timeout:
        raise InvalidConfiguration(
            f"ack timeout tick must be in (0, ack timeout] (got {tick_time:g} s)"
        )
