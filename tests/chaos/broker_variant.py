"""UNSAFE, tests only: the broker with one safety mechanism switched off, to
show that the fault runs' checker catches what it protects against.
``python -m tests.chaos.broker_variant VARIANT <broker arguments>``.

- ``no-session-guard``: the broker forgets its session deadline: the session
  counts as valid until a keep-alive answer says the lease is gone, and the
  write guard always says "go on". So an owner whose lease expired (paused,
  or cut from etcd) still confirms writes, possibly past the fence its
  successor set.
- ``safe``: the broker as shipped.

There is no broker option for this on purpose (nobody should run it so), so
the switch is a patch of one method in this launcher process only.
"""

from __future__ import annotations

import sys

from magnetar.broker.__main__ import main
from magnetar.broker.cluster.session import EtcdSession

VARIANTS = ("safe", "no-session-guard")


def _always_go_on(self: EtcdSession) -> str | None:
    return None


def _valid_until_told(self: EtcdSession) -> bool:
    return not self._lost


if __name__ == "__main__":
    variant = sys.argv[1]
    if variant not in VARIANTS:
        sys.exit(f"unknown variant {variant!r}; one of {VARIANTS}")
    if variant == "no-session-guard":
        EtcdSession.write_guard = _always_go_on  # type: ignore[method-assign]
        EtcdSession.valid = property(_valid_until_told)  # type: ignore[method-assign, assignment]
    sys.exit(main(sys.argv[2:]))
