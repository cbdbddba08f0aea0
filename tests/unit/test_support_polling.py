"""The shared waiting helpers: they return once the condition holds and fail
naming what was awaited once the time is up."""

from __future__ import annotations

import itertools

import pytest

from tests.support.polling import eventually, eventually_async


def test_eventually_returns_once_the_condition_holds() -> None:
    calls = itertools.count()
    eventually("the third poll", lambda: next(calls) == 2, timeout=5)
    assert next(calls) == 3


def test_eventually_fails_naming_what_it_awaited() -> None:
    with pytest.raises(AssertionError, match=r"the impossible did not happen within 0\.05 s"):
        eventually("the impossible", lambda: False, timeout=0.05)


async def test_eventually_async_returns_once_the_condition_holds() -> None:
    calls = itertools.count()
    await eventually_async("the third poll", lambda: next(calls) == 2, timeout=5)
    assert next(calls) == 3


async def test_eventually_async_fails_naming_what_it_awaited() -> None:
    with pytest.raises(AssertionError, match=r"the impossible did not happen within 0\.05 s"):
        await eventually_async("the impossible", lambda: False, timeout=0.05)
