"""Broker-side failures that map to a wire ServerError code.

Raised by the service, topics and subscriptions; ServerCnx turns them into an
ERROR (or SEND_ERROR / PRODUCER error) frame with the code and the message.
Choose a fatal code (proto.errors.FATAL_SERVER_ERRORS) for permanent
problems so the official client fails fast instead of retrying (WIRE 2).
"""

from __future__ import annotations

from magnetar.proto.errors import ServerError


class BrokerServiceError(Exception):
    """A request failed; `code` goes on the wire, the message is for humans."""

    def __init__(self, code: ServerError, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}, {self.message!r})"


class TopicTerminatedError(BrokerServiceError):
    def __init__(self, topic: str) -> None:
        super().__init__(ServerError.TopicTerminatedError, f"topic {topic} is terminated")


class TopicNotFoundError(BrokerServiceError):
    def __init__(self, message: str) -> None:
        super().__init__(ServerError.TopicNotFound, message)


class SubscriptionNotFoundError(BrokerServiceError):
    def __init__(self, message: str) -> None:
        super().__init__(ServerError.SubscriptionNotFound, message)


class ConsumerBusyError(BrokerServiceError):
    def __init__(self, message: str) -> None:
        super().__init__(ServerError.ConsumerBusy, message)


class ConsumerAssignError(BrokerServiceError):
    """Key_Shared could not give the consumer a share of the hash space
    (SEM-4.4.3); the official client fails the subscribe at once."""

    def __init__(self, message: str) -> None:
        super().__init__(ServerError.ConsumerAssignError, message)


class ProducerBusyError(BrokerServiceError):
    def __init__(self, message: str) -> None:
        super().__init__(ServerError.ProducerBusy, message)


class ProducerFencedError(BrokerServiceError):
    def __init__(self, message: str) -> None:
        super().__init__(ServerError.ProducerFenced, message)


class NotAllowedError(BrokerServiceError):
    def __init__(self, message: str) -> None:
        super().__init__(ServerError.NotAllowedError, message)


class ServiceNotReadyError(BrokerServiceError):
    """Retriable: the broker is starting or shutting down."""

    def __init__(self, message: str) -> None:
        super().__init__(ServerError.ServiceNotReady, message)


class ProducerIdInUse(BrokerServiceError):
    """A PRODUCER reuses an id that names another topic's producer on the connection."""

    def __init__(self, producer_id: int) -> None:
        super().__init__(
            ServerError.ProducerBusy,
            f"producer id {producer_id} is already used on this connection for another topic",
        )
