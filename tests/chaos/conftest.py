"""Fixtures: a private namespace network, removed after the test whatever
happens; leftovers of crashed earlier runs are removed first."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.chaos import netns

_REASON = netns.unavailable()


@pytest.fixture
def network() -> Iterator[netns.Network]:
    if _REASON is not None:
        pytest.skip(f"network namespaces unavailable here: {_REASON}")
    netns.remove_leftovers()
    net = netns.Network.create()
    try:
        yield net
    finally:
        net.close()
