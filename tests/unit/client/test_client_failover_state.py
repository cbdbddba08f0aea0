"""AutoClusterFailover's decisions (client/aio/net/failover.py FailoverState),
driven round by round with a scripted reachability instead of sockets."""

from __future__ import annotations

import magnetar.client as pulsar
from magnetar.client.aio.net.failover import FailoverState


def _config() -> tuple[pulsar.AutoClusterFailover, list[pulsar.ServiceInfo]]:
    primary = pulsar.ServiceInfo("pulsar://127.0.0.1:6650")
    secondaries = [
        pulsar.ServiceInfo("pulsar://127.0.0.1:6660"),
        pulsar.ServiceInfo("pulsar://127.0.0.1:6670"),
    ]
    config = pulsar.AutoClusterFailover(
        primary, secondaries, check_interval_ms=100, failover_threshold=2, switch_back_threshold=3
    )
    return config, [primary, *secondaries]


async def test_failover_waits_for_its_threshold_then_takes_the_first_reachable() -> None:
    """Two failed probes of the primary before a move; the first secondary is
    down too, so the second is chosen; a good probe resets the count."""
    config, (primary, first, second) = _config()
    state = FailoverState(config)
    down = {primary.service_url, first.service_url}

    async def reachable(info: pulsar.ServiceInfo) -> bool:
        return info.service_url not in down

    assert await state.step(reachable) is primary  # one failure: stay
    down.discard(primary.service_url)
    assert await state.step(reachable) is primary  # good probe: count reset
    down.add(primary.service_url)
    assert await state.step(reachable) is primary
    assert await state.step(reachable) is second


async def test_switch_back_needs_consecutive_good_probes_of_the_primary() -> None:
    """On a secondary, the primary must answer switch_back_threshold probes in
    a row; one failure in between starts the count again."""
    config, (primary, first, _) = _config()
    state = FailoverState(config)
    up = {first.service_url}

    async def reachable(info: pulsar.ServiceInfo) -> bool:
        return info.service_url in up

    await state.step(reachable)
    assert await state.step(reachable) is first
    up.add(primary.service_url)
    assert await state.step(reachable) is first
    assert await state.step(reachable) is first
    up.discard(primary.service_url)
    assert await state.step(reachable) is first  # the count starts again
    up.add(primary.service_url)
    for _ in range(2):
        assert await state.step(reachable) is first
    assert await state.step(reachable) is primary
