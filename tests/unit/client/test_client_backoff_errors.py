"""Backoff timing and the error mapping (ServerError -> exception class, retriable flag)."""

from __future__ import annotations

import _pulsar
import pulsar
import pytest

from magnetar.client.aio import errors
from magnetar.client.aio.net.backoff import Backoff
from magnetar.proto.errors import FATAL_SERVER_ERRORS, ServerError


def test_backoff_doubles_up_to_the_bound_without_jitter() -> None:
    backoff = Backoff(0.1, 1.0, jitter=0.0)
    assert [round(backoff.next(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.next() == pytest.approx(0.1)


def test_backoff_jitter_only_shortens() -> None:
    draws = iter([0.0, 0.5, 0.999])
    backoff = Backoff(1.0, 4.0, jitter=0.2, rand=lambda: next(draws))
    assert backoff.next() == pytest.approx(1.0)
    assert backoff.next() == pytest.approx(2.0 * 0.9)
    assert backoff.next() == pytest.approx(4.0 * (1 - 0.2 * 0.999))


@pytest.mark.parametrize(("initial", "maximum"), [(0, 1), (2, 1), (-1, 5)])
def test_backoff_rejects_bad_bounds(initial: float, maximum: float) -> None:
    with pytest.raises(ValueError):
        Backoff(initial, maximum)


def test_result_codes_equal_the_official_clients() -> None:
    official = {name: int(value) for name, value in _pulsar.Result.__members__.items()}
    assert {r.name: r.value for r in errors.Result} == official


def test_exception_names_exist_in_the_official_module() -> None:
    for cls in errors.ALL_EXCEPTIONS:
        assert hasattr(pulsar, cls.__name__), cls.__name__
        assert cls.result.name == cls.__name__ or cls.__name__ in ("LookupError",)


@pytest.mark.parametrize("code", list(ServerError))
def test_server_errors_map_to_classes_with_the_official_retry_rule(code: ServerError) -> None:
    """WIRE 2: fatal codes are not retriable, the rest are."""
    exc = errors.from_server_error(code, "detail")
    assert isinstance(exc, errors.PulsarException)
    assert exc.retriable == (code not in FATAL_SERVER_ERRORS)
    assert "detail" in str(exc)


def test_specific_mappings() -> None:
    assert isinstance(
        errors.from_server_error(ServerError.ServiceNotReady), errors.ServiceUnitNotReady
    )
    assert isinstance(
        errors.from_server_error(ServerError.TopicTerminatedError), errors.TopicTerminated
    )
    assert isinstance(
        errors.from_server_error(ServerError.MetadataError), errors.BrokerMetadataError
    )
    unknown = errors.from_server_error(999, "?")
    assert isinstance(unknown, errors.UnknownError) and not unknown.retriable
    assert errors.Timeout().result is errors.Result.Timeout and errors.Timeout().retriable
