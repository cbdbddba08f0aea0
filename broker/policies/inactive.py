"""The inactive-topic policy (Pulsar's InactiveTopicPolicies): when a topic
that stays idle is deleted. The sweep that enforces it is
service/inactivity.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NO_SUBSCRIPTIONS = "delete_when_no_subscriptions"
SUBSCRIPTIONS_CAUGHT_UP = "delete_when_subscriptions_caught_up"
DELETE_MODES = (NO_SUBSCRIPTIONS, SUBSCRIPTIONS_CAUGHT_UP)


@dataclass(frozen=True, slots=True)
class InactiveTopicPolicy:
    """Pulsar's InactiveTopicPolicies."""

    delete_mode: str = NO_SUBSCRIPTIONS
    max_inactive_s: int = 60
    delete_while_inactive: bool = False

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> InactiveTopicPolicy:
        return cls(
            str(body.get("inactiveTopicDeleteMode", NO_SUBSCRIPTIONS)),
            int(body.get("maxInactiveDurationSeconds", 0)),
            bool(body.get("deleteWhileInactive", False)),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "inactiveTopicDeleteMode": self.delete_mode,
            "maxInactiveDurationSeconds": self.max_inactive_s,
            "deleteWhileInactive": self.delete_while_inactive,
        }


# Pulsar's broker defaults with deletion off (see config.py for why).
BROKER_DEFAULT = InactiveTopicPolicy()
