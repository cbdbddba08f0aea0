"""Live brokers and bundle owners as etcd keys, and the load manager's pick.

Keys (under ``/magnetar/cluster/<cluster name>``), each on its owner's lease:

* ``brokers/<broker id>``: :class:`BrokerInfo` as JSON (service URLs, the
  lease, and a load report: topics, bundles, publish rate, CPU share).
* ``bundles/<tenant>/<namespace>/<range>``: :class:`BundleOwner` as JSON.

A broker's keys vanish when its lease expires (crash) or is revoked (clean
shutdown), which is what makes its bundles free for the others.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

import aetcd

from magnetar.broker.cluster.bundles import Bundle

ROOT = "/magnetar/cluster"


@dataclass(frozen=True, slots=True)
class LoadReport:
    topics: int = 0
    bundles: int = 0
    msg_rate_in: float = 0.0
    cpu: float = 0.0  # this process' CPU time per wall second (1.0 = one core)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: str
    service_url: str
    service_url_tls: str
    web_service_url: str
    lease: int
    load: LoadReport = field(default_factory=LoadReport)
    # advertised_listeners: name -> service URL (LOOKUP by listener name);
    # left out of equality and hashing (a dict is not hashable).
    listeners: dict[str, str] = field(default_factory=dict, compare=False)

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @staticmethod
    def decode(raw: bytes) -> BrokerInfo:
        body: dict[str, Any] = json.loads(raw)
        load = LoadReport(**body.pop("load", {}))
        return BrokerInfo(**body, load=load)


@dataclass(frozen=True, slots=True)
class BundleOwner:
    broker_id: str
    service_url: str
    service_url_tls: str
    web_service_url: str
    lease: int
    listeners: dict[str, str] = field(default_factory=dict, compare=False)

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @staticmethod
    def decode(raw: bytes) -> BundleOwner:
        return BundleOwner(**json.loads(raw))

    @staticmethod
    def of(broker: BrokerInfo) -> BundleOwner:
        return BundleOwner(
            broker.broker_id,
            broker.service_url,
            broker.service_url_tls,
            broker.web_service_url,
            broker.lease,
            dict(broker.listeners),
        )


class ClusterKeys:
    """The etcd key names of one cluster."""

    def __init__(self, cluster: str) -> None:
        self.base = f"{ROOT}/{cluster}"

    def broker(self, broker_id: str) -> bytes:
        return f"{self.base}/brokers/{broker_id}".encode()

    @property
    def brokers(self) -> bytes:
        return f"{self.base}/brokers/".encode()

    def bundle(self, bundle: Bundle) -> bytes:
        return f"{self.base}/bundles/{bundle.namespace}/{bundle.range_name}".encode()

    @property
    def bundles(self) -> bytes:
        return f"{self.base}/bundles/".encode()


async def live_brokers(client: aetcd.Client, keys: ClusterKeys) -> list[BrokerInfo]:
    found = await client.get_prefix(keys.brokers)
    return sorted((BrokerInfo.decode(kv.value) for kv in found), key=lambda b: b.broker_id)


async def bundle_owners(client: aetcd.Client, keys: ClusterKeys) -> dict[str, BundleOwner]:
    """Bundle key suffix (``tenant/ns/range``) -> owner, for every owned bundle."""
    found = await client.get_prefix(keys.bundles)
    cut = len(keys.bundles)
    return {kv.key[cut:].decode(): BundleOwner.decode(kv.value) for kv in found}


def least_loaded(
    bundle: Bundle,
    brokers: list[BrokerInfo],
    owners: dict[str, BundleOwner],
    exclude: str = "",
) -> BrokerInfo | None:
    """The broker that should take `bundle`: fewest owned bundles (counted from
    the ownership keys, always current), then fewest topics, then CPU; ties
    broken by a hash of bundle and broker so that equal brokers share evenly."""
    owned: dict[str, int] = {}
    for owner in owners.values():
        owned[owner.broker_id] = owned.get(owner.broker_id, 0) + 1
    candidates = [b for b in brokers if b.broker_id != exclude]
    if not candidates:
        return None

    def score(b: BrokerInfo) -> tuple[int, int, float, int]:
        spread = zlib.crc32(f"{bundle}|{b.broker_id}".encode())
        return (owned.get(b.broker_id, 0), b.load.topics, round(b.load.cpu, 1), spread)

    return min(candidates, key=score)
