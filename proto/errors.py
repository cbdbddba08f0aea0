"""Errors shared by broker and client: whose fault it is, and the wire error codes.

`ProtocolError` means the peer sent something we cannot accept (the connection
is usually closed after it); `UsageError` means our own caller misused an API.
"""

from __future__ import annotations

from enum import IntEnum


class ProtocolError(Exception):
    """The peer violated the wire protocol; the message says what was wrong."""


class FrameTooLarge(ProtocolError):
    """A frame's size prefix is above the configured maximum."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class ChecksumMismatch(ProtocolError):
    """A payload frame's CRC32C does not match its metadata and payload.

    The frame was well delimited, so the stream is still in sync: `frame` holds
    it (with its command) so a broker can answer SEND_ERROR(ChecksumError) and a
    client can ACK with validation_error = ChecksumMismatch.
    """

    def __init__(self, expected: int, actual: int, frame: object) -> None:
        super().__init__(
            f"payload checksum mismatch: frame says {expected:#010x}, data has {actual:#010x}"
        )
        self.expected = expected
        self.actual = actual
        self.frame = frame


class UsageError(Exception):
    """Our caller used an API wrongly (bad argument, wrong state)."""


class ServerError(IntEnum):
    """Pulsar's ServerError codes (wire values)."""

    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    ProducerBlockedQuotaExceededError = 7
    ProducerBlockedQuotaExceededException = 8
    ChecksumError = 9
    UnsupportedVersionError = 10
    TopicNotFound = 11
    SubscriptionNotFound = 12
    ConsumerNotFound = 13
    TooManyRequests = 14
    TopicTerminatedError = 15
    ProducerBusy = 16
    InvalidTopicName = 17
    IncompatibleSchema = 18
    ConsumerAssignError = 19
    TransactionCoordinatorNotFound = 20
    InvalidTxnStatus = 21
    NotAllowedError = 22
    TransactionConflict = 23
    TransactionNotFound = 24
    ProducerFenced = 25


# Codes the official client gives up on at once (WIRE.md, behaviour 2). Anything
# else is retried until the operation timeout, so a permanent problem must use
# one of these.
FATAL_SERVER_ERRORS: frozenset[ServerError] = frozenset(
    {
        ServerError.AuthenticationError,
        ServerError.AuthorizationError,
        ServerError.TopicNotFound,
        ServerError.TopicTerminatedError,
        ServerError.IncompatibleSchema,
        ServerError.ProducerBusy,
        ServerError.ConsumerBusy,
        ServerError.ProducerFenced,
        ServerError.NotAllowedError,
        ServerError.ChecksumError,
    }
)


def is_retriable(code: int) -> bool:
    """Whether a client should retry an operation that failed with `code`."""
    try:
        return ServerError(code) not in FATAL_SERVER_ERRORS
    except ValueError:
        return False
