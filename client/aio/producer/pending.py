"""What a producer keeps per SEND frame until its receipt, and how it answers callers."""

from __future__ import annotations

import asyncio

from magnetar.client.aio.errors import PulsarException
from magnetar.client.aio.log import get_logger
from magnetar.client.aio.message import SendCallback
from magnetar.proto.ids import MessageId

_log = get_logger("magnetar.client")


class OpSendMsg:
    """One SEND frame waiting for its receipt."""

    __slots__ = (
        "callbacks",
        "deadline",
        "frame",
        "highest_sequence_id",
        "is_batch",
        "sequence_id",
        "waiters",
        "weight",
    )

    def __init__(
        self,
        frame: bytes,
        sequence_id: int,
        highest_sequence_id: int,
        callbacks: list[SendCallback | None],
        *,
        is_batch: bool,
        weight: int,
    ) -> None:
        self.frame = frame
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.callbacks = callbacks
        self.is_batch = is_batch
        # Messages this op holds against max_pending_messages (0 for a non-final chunk).
        self.weight = weight
        self.deadline = 0.0
        self.waiters: list[asyncio.Future[None]] | None = None


def call_back(
    callback: SendCallback | None, error: PulsarException | None, msg_id: MessageId | None
) -> None:
    if callback is None:
        return
    try:
        callback(error, msg_id)
    except Exception:  # an application callback must not break the producer
        _log.exception("send callback raised")
