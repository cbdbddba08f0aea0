"""Consumer policies named as in the official client: dead letter, batch receive, Key_Shared.

Each has a `from_official` that also takes the official `pulsar` object, so
code written for `pulsar` can hand its policies over unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from magnetar.client.aio.enums import KeySharedMode
from magnetar.client.aio.errors import InvalidConfiguration
from magnetar.proto import pulsar_api_pb2 as pb

DEFAULT_BATCH_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_BATCH_TIMEOUT_MS = 100


@dataclass(frozen=True)
class DeadLetterPolicy:
    """SEM-6.1; topics default to `<topic>-<subscription>-DLQ` / `-RETRY`."""

    max_redeliver_count: int
    # "" means the default, as in the official client.
    dead_letter_topic: str = ""
    initial_subscription_name: str = ""
    retry_letter_topic: str = ""

    def __post_init__(self) -> None:
        if self.max_redeliver_count < 1:
            raise InvalidConfiguration("max_redeliver_count must be >= 1")

    @classmethod
    def from_official(cls, policy: Any) -> DeadLetterPolicy:
        if isinstance(policy, DeadLetterPolicy):
            return policy
        return cls(
            int(policy.max_redeliver_count),
            policy.dead_letter_topic or "",
            policy.initial_subscription_name or "",
            getattr(policy, "retry_letter_topic", None) or "",
        )

    def dlq_topic(self, topic: str, subscription: str) -> str:
        return self.dead_letter_topic or f"{topic}-{subscription}-DLQ"

    def retry_topic(self, topic: str, subscription: str) -> str:
        return self.retry_letter_topic or f"{topic}-{subscription}-RETRY"


@dataclass(frozen=True)
class BatchReceivePolicy:
    """SEM-1 batch_receive_policy: batch_receive returns at the first limit hit."""

    max_num_message: int = -1
    max_num_bytes: int = DEFAULT_BATCH_MAX_BYTES
    timeout_ms: int = DEFAULT_BATCH_TIMEOUT_MS

    def __post_init__(self) -> None:
        if self.max_num_message <= 0 and self.max_num_bytes <= 0 and self.timeout_ms <= 0:
            raise InvalidConfiguration("a batch receive policy needs at least one limit")

    @classmethod
    def from_official(cls, policy: Any) -> BatchReceivePolicy:
        if isinstance(policy, BatchReceivePolicy):
            return policy
        inner = policy.policy() if callable(getattr(policy, "policy", None)) else policy
        return cls(
            int(inner.getMaxNumMessages()),
            int(inner.getMaxNumBytes()),
            int(inner.getTimeoutMs()),
        )


HASH_RANGE_SIZE = 1 << 16  # Key_Shared hashes fall in [0, 65536)


def check_sticky_ranges(ranges: list[tuple[int, int]]) -> None:
    """SEM Key_Shared sticky: inclusive ranges inside the hash space, none overlapping."""
    previous: tuple[int, int] | None = None
    for start, end in sorted(ranges):
        if not 0 <= start <= end < HASH_RANGE_SIZE:
            raise InvalidConfiguration(
                f"sticky range [{start}, {end}] is outside [0, {HASH_RANGE_SIZE - 1}]"
            )
        if previous is not None and start <= previous[1]:
            raise InvalidConfiguration(
                f"sticky ranges [{previous[0]}, {previous[1]}] and [{start}, {end}] overlap"
            )
        previous = (start, end)


@dataclass(frozen=True)
class KeySharedPolicy:
    key_shared_mode: KeySharedMode = KeySharedMode.AutoSplit
    allow_out_of_order_delivery: bool = False
    sticky_ranges: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.key_shared_mode == KeySharedMode.Sticky and not self.sticky_ranges:
            raise InvalidConfiguration("a Sticky key shared policy needs sticky_ranges")
        check_sticky_ranges(self.sticky_ranges)

    @classmethod
    def from_official(cls, policy: Any) -> KeySharedPolicy:
        if isinstance(policy, KeySharedPolicy):
            return policy
        return cls(
            KeySharedMode(int(policy.key_shared_mode)),
            bool(policy.allow_out_of_order_delivery),
            [(int(a), int(b)) for a, b in policy.sticky_ranges or []],
        )

    def to_proto(self) -> pb.KeySharedMeta:
        meta = pb.KeySharedMeta(
            keySharedMode=int(self.key_shared_mode),  # type: ignore[arg-type]
            allowOutOfOrderDelivery=self.allow_out_of_order_delivery,
        )
        for start, end in self.sticky_ranges:
            meta.hashRanges.add(start=start, end=end)
        return meta
