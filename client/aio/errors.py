"""Client exceptions, named and numbered like the official client's `pulsar.Result`.

Every exception is a `PulsarException` carrying a `result` (a `Result` value,
the same numbers as `_pulsar.Result`) and a `retriable` flag saying whether
the operation may succeed if tried again. Broker error codes (`ServerError`)
map onto these classes through `from_server_error`.
"""

from __future__ import annotations

from enum import IntEnum

from magnetar.proto.errors import ServerError, is_retriable


class Result(IntEnum):
    """The official client's result codes (values as in `_pulsar.Result`)."""

    Ok = 0
    UnknownError = 1
    InvalidConfiguration = 2
    Timeout = 3
    LookupError = 4
    ConnectError = 5
    ReadError = 6
    AuthenticationError = 7
    AuthorizationError = 8
    ErrorGettingAuthenticationData = 9
    BrokerMetadataError = 10
    BrokerPersistenceError = 11
    ChecksumError = 12
    ConsumerBusy = 13
    NotConnected = 14
    AlreadyClosed = 15
    InvalidMessage = 16
    ConsumerNotInitialized = 17
    ProducerNotInitialized = 18
    ProducerBusy = 19
    TooManyLookupRequestException = 20
    InvalidTopicName = 21
    InvalidUrl = 22
    ServiceUnitNotReady = 23
    OperationNotSupported = 24
    ProducerBlockedQuotaExceededError = 25
    ProducerBlockedQuotaExceededException = 26
    ProducerQueueIsFull = 27
    MessageTooBig = 28
    TopicNotFound = 29
    SubscriptionNotFound = 30
    ConsumerNotFound = 31
    UnsupportedVersionError = 32
    TopicTerminated = 33
    CryptoError = 34
    IncompatibleSchema = 35
    ConsumerAssignError = 36
    CumulativeAcknowledgementNotAllowedError = 37
    TransactionCoordinatorNotFoundError = 38
    InvalidTxnStatusError = 39
    NotAllowedError = 40
    TransactionConflict = 41
    TransactionNotFound = 42
    ProducerFenced = 43
    MemoryBufferIsFull = 44
    Interrupted = 45


class PulsarException(Exception):
    """Base of every client error; `result` is the code, `retriable` says whether to retry."""

    result: Result = Result.UnknownError
    retriable: bool = False

    def __init__(self, message: str = "", *, retriable: bool | None = None) -> None:
        super().__init__(message or self.result.name)
        if retriable is not None:
            self.retriable = retriable

    def error(self) -> Result:
        """The result code (the official asyncio client's accessor name)."""
        return self.result

    def __str__(self) -> str:
        text = super().__str__()
        return f"{self.result.name}: {text}" if text != self.result.name else text


class UnknownError(PulsarException):
    result = Result.UnknownError


# A bad argument is also a ValueError, as the official client raises for
# every argument it refuses (its tests catch ValueError).
class InvalidConfiguration(PulsarException, ValueError):
    result = Result.InvalidConfiguration


class Timeout(PulsarException):
    result = Result.Timeout
    retriable = True


class LookupError(PulsarException):
    result = Result.LookupError
    retriable = True


class ConnectError(PulsarException):
    result = Result.ConnectError
    retriable = True


class ReadError(PulsarException):
    result = Result.ReadError
    retriable = True


class AuthenticationError(PulsarException):
    result = Result.AuthenticationError


class AuthorizationError(PulsarException):
    result = Result.AuthorizationError


class ErrorGettingAuthenticationData(PulsarException):
    result = Result.ErrorGettingAuthenticationData


class BrokerMetadataError(PulsarException):
    result = Result.BrokerMetadataError
    retriable = True


class BrokerPersistenceError(PulsarException):
    result = Result.BrokerPersistenceError
    retriable = True


class ChecksumError(PulsarException):
    result = Result.ChecksumError


class ConsumerBusy(PulsarException):
    result = Result.ConsumerBusy


class NotConnected(PulsarException):
    result = Result.NotConnected
    retriable = True


class AlreadyClosed(PulsarException):
    result = Result.AlreadyClosed


class InvalidMessage(PulsarException):
    result = Result.InvalidMessage


class ConsumerNotInitialized(PulsarException):
    result = Result.ConsumerNotInitialized


class ProducerNotInitialized(PulsarException):
    result = Result.ProducerNotInitialized


class ProducerBusy(PulsarException):
    result = Result.ProducerBusy


class TooManyLookupRequestException(PulsarException):
    result = Result.TooManyLookupRequestException
    retriable = True


class InvalidTopicName(PulsarException, ValueError):
    result = Result.InvalidTopicName


class InvalidUrl(PulsarException, ValueError):
    result = Result.InvalidUrl


class ServiceUnitNotReady(PulsarException):
    result = Result.ServiceUnitNotReady
    retriable = True


class OperationNotSupported(PulsarException):
    result = Result.OperationNotSupported


class ProducerBlockedQuotaExceededError(PulsarException):
    result = Result.ProducerBlockedQuotaExceededError
    retriable = True


class ProducerBlockedQuotaExceededException(PulsarException):
    result = Result.ProducerBlockedQuotaExceededException
    retriable = True


class ProducerQueueIsFull(PulsarException):
    result = Result.ProducerQueueIsFull
    retriable = True


class MessageTooBig(PulsarException):
    result = Result.MessageTooBig


class TopicNotFound(PulsarException):
    result = Result.TopicNotFound


class SubscriptionNotFound(PulsarException):
    result = Result.SubscriptionNotFound
    retriable = True


class ConsumerNotFound(PulsarException):
    result = Result.ConsumerNotFound
    retriable = True


class UnsupportedVersionError(PulsarException):
    result = Result.UnsupportedVersionError
    retriable = True


class TopicTerminated(PulsarException):
    result = Result.TopicTerminated


class CryptoError(PulsarException):
    result = Result.CryptoError


class IncompatibleSchema(PulsarException):
    result = Result.IncompatibleSchema


class ConsumerAssignError(PulsarException):
    result = Result.ConsumerAssignError
    retriable = True


class CumulativeAcknowledgementNotAllowedError(PulsarException):
    result = Result.CumulativeAcknowledgementNotAllowedError


class TransactionCoordinatorNotFoundError(PulsarException):
    result = Result.TransactionCoordinatorNotFoundError


class InvalidTxnStatusError(PulsarException):
    result = Result.InvalidTxnStatusError


class NotAllowedError(PulsarException):
    result = Result.NotAllowedError


class TransactionConflict(PulsarException):
    result = Result.TransactionConflict


class TransactionNotFound(PulsarException):
    result = Result.TransactionNotFound


class ProducerFenced(PulsarException):
    result = Result.ProducerFenced


class MemoryBufferIsFull(PulsarException):
    result = Result.MemoryBufferIsFull
    retriable = True


class Interrupted(PulsarException):
    result = Result.Interrupted


_BY_SERVER_ERROR: dict[ServerError, type[PulsarException]] = {
    ServerError.UnknownError: UnknownError,
    ServerError.MetadataError: BrokerMetadataError,
    ServerError.PersistenceError: BrokerPersistenceError,
    ServerError.AuthenticationError: AuthenticationError,
    ServerError.AuthorizationError: AuthorizationError,
    ServerError.ConsumerBusy: ConsumerBusy,
    ServerError.ServiceNotReady: ServiceUnitNotReady,
    ServerError.ProducerBlockedQuotaExceededError: ProducerBlockedQuotaExceededError,
    ServerError.ProducerBlockedQuotaExceededException: ProducerBlockedQuotaExceededException,
    ServerError.ChecksumError: ChecksumError,
    ServerError.UnsupportedVersionError: UnsupportedVersionError,
    ServerError.TopicNotFound: TopicNotFound,
    ServerError.SubscriptionNotFound: SubscriptionNotFound,
    ServerError.ConsumerNotFound: ConsumerNotFound,
    ServerError.TooManyRequests: TooManyLookupRequestException,
    ServerError.TopicTerminatedError: TopicTerminated,
    ServerError.ProducerBusy: ProducerBusy,
    ServerError.InvalidTopicName: InvalidTopicName,
    ServerError.IncompatibleSchema: IncompatibleSchema,
    ServerError.ConsumerAssignError: ConsumerAssignError,
    ServerError.TransactionCoordinatorNotFound: TransactionCoordinatorNotFoundError,
    ServerError.InvalidTxnStatus: InvalidTxnStatusError,
    ServerError.NotAllowedError: NotAllowedError,
    ServerError.TransactionConflict: TransactionConflict,
    ServerError.TransactionNotFound: TransactionNotFound,
    ServerError.ProducerFenced: ProducerFenced,
}


def from_server_error(code: int, message: str = "") -> PulsarException:
    """The exception for a broker's ServerError code; retriable as the official client treats it."""
    try:
        cls = _BY_SERVER_ERROR[ServerError(code)]
    except (ValueError, KeyError):
        return UnknownError(f"server error {code}: {message}", retriable=False)
    return cls(message, retriable=is_retriable(code))


ALL_EXCEPTIONS: tuple[type[PulsarException], ...] = tuple(
    cls
    for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, PulsarException) and cls is not PulsarException
)
