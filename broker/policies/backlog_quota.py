"""Backlog quotas (Pulsar's backlogQuotaMap) and what happens past them.

Two kinds, as in Pulsar:
- destination_storage: a size limit (limitSize bytes) on the backlog, estimated
  as Pulsar does from stored bytes (the share of the ledger's bytes that the
  slowest durable cursor has not consumed);
- message_age: a time limit (limitTime seconds) on the oldest unconsumed
  message of the slowest durable subscription, measured by the periodic quota
  check from that entry's publish time.

Past a limit, the quota's policy applies:
- producer_request_hold: producers are disconnected by the check and refused
  (new ones too) with ProducerBlockedQuotaExceededError, which clients retry;
- producer_exception: the same with ProducerBlockedQuotaExceededException,
  which fails the producers' pending sends;
- consumer_backlog_eviction: producers go on; the slowest subscriptions skip
  their oldest messages (size) or expire those older than the limit (age).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.storage.api import ManagedLedger
from magnetar.proto.errors import ServerError
from magnetar.proto.frames import Payload

QUOTA_KEY = "backlog_quota_map"
EVICTION = "consumer_backlog_eviction"


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    limit: int  # bytes (destination_storage) or seconds (message_age)
    policy: str

    @property
    def blocks_producers(self) -> bool:
        return self.policy != EVICTION


@dataclass(frozen=True, slots=True)
class BacklogQuotas:
    size: BacklogQuota | None = None
    age: BacklogQuota | None = None

    @classmethod
    def from_policies(cls, policies: Mapping[str, Any]) -> BacklogQuotas:
        quotas = policies.get(QUOTA_KEY) or {}
        return cls(
            _quota(quotas.get("destination_storage"), "limitSize"),
            _quota(quotas.get("message_age"), "limitTime"),
        )


def _quota(body: object, field: str) -> BacklogQuota | None:
    if not isinstance(body, dict) or int(body.get(field, -1)) < 0:
        return None
    return BacklogQuota(int(body[field]), str(body.get("policy", "producer_request_hold")))


def backlog_bytes(ledger: ManagedLedger) -> int:
    """Estimated bytes the slowest durable cursor has yet to consume."""
    entries = ledger.number_of_entries
    if entries <= 0:
        return 0
    slowest = max((c.backlog_entries for c in ledger.cursors if c.is_durable), default=0)
    return ledger.total_size * min(slowest, entries) // entries


async def oldest_backlog_publish_ms(ledger: ManagedLedger) -> int | None:
    """Publish time of the first entry the slowest durable subscription has
    not consumed (None: no backlog)."""
    durable = [c for c in ledger.cursors if c.is_durable and c.backlog_entries]
    if not durable:
        return None
    slowest = min(durable, key=lambda c: c.mark_delete_position)
    entries = await ledger.read_positions([ledger.next_position(slowest.mark_delete_position)])
    if not entries:
        return None
    return int(Payload.parse(entries[0].data, verify_checksum=False).metadata.publish_time)


class QuotaState:
    """A topic's quotas and the age the last check measured."""

    def __init__(self) -> None:
        self.quotas = BacklogQuotas()
        self.backlog_age_s = 0.0

    async def measure_age(self, ledger: ManagedLedger, now_s: float) -> None:
        if self.quotas.age is None:
            self.backlog_age_s = 0.0
            return
        oldest = await oldest_backlog_publish_ms(ledger)
        self.backlog_age_s = 0.0 if oldest is None else max(0.0, now_s - oldest / 1000)

    def over_quota(
        self, ledger: ManagedLedger, *, blocking: bool
    ) -> tuple[BacklogQuota, str] | None:
        """The quota (of a blocking policy, or of eviction) the backlog is
        over, and why; None when within them."""
        size, age = self.quotas.size, self.quotas.age
        if size is not None and size.blocks_producers == blocking:
            current = backlog_bytes(ledger)
            if current > size.limit:
                return size, (
                    f"its backlog (~{current} bytes) exceeds the backlog quota of "
                    f"{size.limit} bytes (policy {size.policy})"
                )
        if age is not None and age.blocks_producers == blocking and self.backlog_age_s > age.limit:
            return age, (
                f"its oldest unconsumed message ({self.backlog_age_s:.0f} s old) exceeds "
                f"the backlog quota of {age.limit} s (policy {age.policy})"
            )
        return None

    def check_producer(self, ledger: ManagedLedger, topic: str) -> None:
        """Refuse a new producer while the backlog is over a blocking quota."""
        over = self.over_quota(ledger, blocking=True)
        if over is None:
            return
        quota, reason = over
        code = (
            ServerError.ProducerBlockedQuotaExceededError
            if quota.policy == "producer_request_hold"
            else ServerError.ProducerBlockedQuotaExceededException
        )
        raise BrokerServiceError(code, f"cannot create producer on {topic}: {reason}")
