"""Backlog quota (Pulsar's destination_storage quota): a size limit on a
topic's backlog and what happens past it.

- producer_request_hold: new producers are refused with
  ProducerBlockedQuotaExceededError (the client may retry later);
- producer_exception: new producers are refused with
  ProducerBlockedQuotaExceededException;
- consumer_backlog_eviction: producers go on; the expiry sweep moves the
  slowest subscriptions' mark-delete forward until the backlog fits.

The backlog size is estimated as Pulsar does, from stored bytes: the share of
the ledger's bytes that the slowest durable cursor has not consumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.storage.api import ManagedLedger
from magnetar.proto.errors import ServerError

QUOTA_KEY = "backlog_quota_map"


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    limit_size: int
    policy: str

    @classmethod
    def from_policies(cls, policies: Mapping[str, Any]) -> BacklogQuota | None:
        body = (policies.get(QUOTA_KEY) or {}).get("destination_storage")
        if not isinstance(body, dict) or int(body.get("limitSize", -1)) < 0:
            return None
        return cls(int(body["limitSize"]), str(body.get("policy", "producer_request_hold")))


def backlog_bytes(ledger: ManagedLedger) -> int:
    """Estimated bytes the slowest durable cursor has yet to consume."""
    entries = ledger.number_of_entries
    if entries <= 0:
        return 0
    slowest = max((c.backlog_entries for c in ledger.cursors if c.is_durable), default=0)
    return ledger.total_size * min(slowest, entries) // entries


def check_producer(ledger: ManagedLedger, quota: BacklogQuota | None, topic: str) -> None:
    """Refuse a new producer while the backlog is over a blocking quota."""
    if quota is None or quota.policy == "consumer_backlog_eviction":
        return
    size = backlog_bytes(ledger)
    if size <= quota.limit_size:
        return
    code = (
        ServerError.ProducerBlockedQuotaExceededError
        if quota.policy == "producer_request_hold"
        else ServerError.ProducerBlockedQuotaExceededException
    )
    raise BrokerServiceError(
        code,
        f"cannot create producer on {topic}: its backlog (~{size} bytes) exceeds the "
        f"backlog quota of {quota.limit_size} bytes (policy {quota.policy})",
    )
