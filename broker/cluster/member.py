"""ClusterMember: this broker's place in a cluster.

It holds the etcd session (a lease), registers the broker with a load
report, answers LOOKUP from bundle ownership (Connect when it owns the
topic's bundle, Redirect to the owner otherwise, and for an unowned bundle
the least-loaded live broker takes it on the authoritative lookup), and
gives bundles up: on unload (handed to another broker), on shutdown
(released), and at once when the session is lost (every topic closed,
then a new session joins again).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aetcd
import aetcd.exceptions
import structlog

from magnetar.broker.cluster.brokers import (
    BrokerInfo,
    BundleOwner,
    ClusterKeys,
    LoadReport,
    bundle_owners,
    least_loaded,
    live_brokers,
)
from magnetar.broker.cluster.bundles import Bundle, bundle_of
from magnetar.broker.cluster.metrics import ClusterMetrics
from magnetar.broker.cluster.policy_watch import PolicyWatcher
from magnetar.broker.cluster.session import EtcdSession, MonotonicClock
from magnetar.broker.config import BrokerConfig
from magnetar.broker.errors import ServiceNotReadyError
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.service.lookup import LookupAnswer
from magnetar.proto.naming import TopicName

log = structlog.get_logger(__name__)

# An assignment can race another broker's; a few rounds settle it.
_LOOKUP_ROUNDS = 5


class ClusterMember:
    def __init__(
        self,
        client: aetcd.Client,
        config: BrokerConfig,
        clock: MonotonicClock = time.monotonic,
        metadata_key: Callable[[str], bytes] | None = None,
        metrics: ClusterMetrics | None = None,
    ) -> None:
        """`metadata_key` maps metadata store paths to etcd keys: with it, the
        member watches the policies other brokers change."""
        self.client = client
        self._metadata_key = metadata_key
        self.metrics = metrics or ClusterMetrics()
        self.metrics.watch(
            lambda: len(self.owned), lambda: self.session is not None and self.session.valid
        )
        self.config = config
        self.keys = ClusterKeys(config.cluster_name)
        self._clock = clock
        self.session: EtcdSession | None = None
        self.service: BrokerService | None = None
        self.info: BrokerInfo | None = None
        # Bundles this broker has checked it owns (under the current session).
        self.owned: set[Bundle] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._report_task: asyncio.Task[None] | None = None
        self._policy_watch: PolicyWatcher | None = None
        # Set when the broker starts leaving: it takes no bundle any more.
        self._leaving = False
        self._closed = False
        self._cpu_mark = (time.process_time(), clock(), 0.0)

    # ---------------------------------------------------------------- lifecycle

    async def open_session(self) -> None:
        self.session = await EtcdSession.open(
            self.client, self.config.cluster_lease_seconds, self._session_lost, self._clock
        )

    def write_guard(self) -> str | None:
        """The storage asks before confirming a write (see session.py)."""
        if self.session is None:
            return "the broker has no etcd session"
        return self.session.write_guard()

    def attach(self, service: BrokerService) -> None:
        self.service = service
        service.ownership = self
        if self._metadata_key is not None:
            self._policy_watch = PolicyWatcher(
                self.client, self._metadata_key, service.policies.namespace_changed
            )

    async def join(self, service_url: str, service_url_tls: str, web_url: str) -> None:
        """Register this broker (its lease must be open); then it serves."""
        assert self.session is not None
        broker_id = service_url.split("://", 1)[-1]
        self.info = BrokerInfo(
            broker_id,
            service_url,
            service_url_tls,
            web_url,
            self.session.lease_id,
            listeners=self.config.listeners(),
        )
        await self._register()
        if self._report_task is None:
            self._report_task = asyncio.get_running_loop().create_task(
                self._report_loop(), name="cluster-load-report"
            )
            if self._policy_watch is not None:
                self._policy_watch.start()
        log.info("joined the cluster", broker=broker_id, lease=self.session.lease_id)

    async def _register(self) -> None:
        assert self.info is not None and self.session is not None
        self.info = BrokerInfo(
            self.info.broker_id,
            self.info.service_url,
            self.info.service_url_tls,
            self.info.web_service_url,
            self.session.lease_id,
            self._load(),
            self.info.listeners,
        )
        await self.client.put(
            self.keys.broker(self.info.broker_id), self.info.encode(), lease=self.session.lease_id
        )

    def _load(self) -> LoadReport:
        """Topics, bundles, and since the last report: messages published
        per second and CPU seconds per second of this process."""
        published = 0.0
        if self.service is not None:
            registry = self.service.metrics.registry
            published = registry.get_sample_value("pulsar_in_messages_total") or 0.0
        cpu_now, wall_now = time.process_time(), self._clock()
        cpu_then, wall_then, published_then = self._cpu_mark
        self._cpu_mark = (cpu_now, wall_now, published)
        elapsed = wall_now - wall_then
        cpu = (cpu_now - cpu_then) / elapsed if elapsed > 0 else 0.0
        rate = (published - published_then) / elapsed if elapsed > 0 else 0.0
        topics = len(self.service.topics) if self.service is not None else 0
        return LoadReport(
            topics=topics, bundles=len(self.owned), msg_rate_in=round(rate, 1), cpu=round(cpu, 3)
        )

    async def _report_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.cluster_load_report_interval_seconds)
            if self.session is None or not self.session.valid:
                continue
            try:
                await self._register()
            except aetcd.exceptions.ClientError as exc:
                log.warning("load report failed", error=repr(exc))

    async def close(self) -> None:
        """Graceful leave: close the owned bundles' topics, release them, drop
        the lease. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._leaving = True
        if self.info is not None:
            # Unregistered first: no broker picks this one for a bundle now.
            with contextlib.suppress(aetcd.exceptions.ClientError):
                await self.client.delete(self.keys.broker(self.info.broker_id))
        if self._report_task is not None:
            self._report_task.cancel()
            await asyncio.gather(self._report_task, return_exceptions=True)
        if self._policy_watch is not None:
            await self._policy_watch.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for bundle in sorted(self.owned):
            with contextlib.suppress(aetcd.exceptions.ClientError):
                await self._release(bundle, hand_to=None)
        if self.session is not None:
            await self.session.close(revoke=True)

    # ------------------------------------------------------------------ lookup

    def _bundle(self, name: TopicName) -> Bundle:
        return bundle_of(name, self.config.default_namespace_bundles)

    def _me(self) -> BrokerInfo:
        if self.info is None or self.session is None or not self.session.valid:
            raise ServiceNotReadyError("the broker is not in the cluster (no etcd session)")
        return self.info

    def _check_staying(self, name: TopicName) -> None:
        if self._leaving:
            raise ServiceNotReadyError(f"the broker is leaving the cluster; look {name} up again")

    def is_me(self, owner: BundleOwner) -> bool:
        me = self.info
        return (
            me is not None
            and self.session is not None
            and owner.broker_id == me.broker_id
            and owner.lease == self.session.lease_id
        )

    async def owner_of(self, bundle: Bundle) -> BundleOwner | None:
        got = await self.client.get(self.keys.bundle(bundle))
        return None if got is None else BundleOwner.decode(got.value)

    async def lookup(
        self, name: TopicName, authoritative: bool, listener_name: str = ""
    ) -> LookupAnswer:
        """Where `name` is served, as the URLs of the listener the client named
        (advertised_listeners; the default ones without a name)."""

        def answer(broker: BrokerInfo | BundleOwner, redirect: bool = False) -> LookupAnswer:
            if not listener_name:
                return LookupAnswer(broker.service_url, broker.service_url_tls, redirect=redirect)
            url = broker.listeners.get(listener_name)
            if url is None:
                # Pulsar's words, as standalone answers them.
                raise ServiceNotReadyError(f"the broker do not have {listener_name} listener")
            return LookupAnswer(url, url, redirect=redirect)

        bundle = self._bundle(name)
        for _ in range(_LOOKUP_ROUNDS):
            me = self._me()
            owner = await self.owner_of(bundle)
            if owner is not None:
                if self.is_me(owner):
                    self.owned.add(bundle)
                    return answer(me)
                self.metrics.lookup_redirects.inc()
                return answer(owner, redirect=True)
            if not authoritative or self._leaving:
                brokers = await live_brokers(self.client, self.keys)
                target = least_loaded(
                    bundle,
                    brokers,
                    await bundle_owners(self.client, self.keys),
                    exclude=me.broker_id if self._leaving else "",
                )
                if target is not None and target.broker_id != me.broker_id:
                    # The client asks there again, authoritatively: it takes it.
                    self.metrics.lookup_redirects.inc()
                    return answer(target, redirect=True)
            self._check_staying(name)
            if await self._acquire(bundle, me):
                return answer(me)
        raise ServiceNotReadyError(f"bundle {bundle} is changing owners; try again")

    async def _acquire(self, bundle: Bundle, me: BrokerInfo) -> bool:
        assert self.session is not None
        key = self.keys.bundle(bundle)
        txn = self.client.transactions
        ok, _ = await self.client.transaction(
            compare=[txn.version(key) == 0],
            success=[txn.put(key, BundleOwner.of(me).encode(), lease=self.session.lease_id)],
            failure=[],
        )
        if ok:
            self.owned.add(bundle)
            self.metrics.bundles_acquired.inc()
            log.info("bundle acquired", bundle=str(bundle))
        return bool(ok)

    async def check_owner(self, name: TopicName) -> None:
        bundle = self._bundle(name)
        self._me()
        self._check_staying(name)
        owner = await self.owner_of(bundle)
        if owner is None or not self.is_me(owner):
            self.owned.discard(bundle)
            raise ServiceNotReadyError(
                f"topic {name} is not served by this broker (bundle {bundle}); look it up again"
            )
        self.owned.add(bundle)

    async def served_elsewhere(self, name: TopicName) -> str | None:
        bundle = self._bundle(name)
        owner = await self.owner_of(bundle)
        if owner is None:
            await self.lookup(name, authoritative=True)
            owner = await self.owner_of(bundle)
        if owner is None or self.is_me(owner):
            return None
        return owner.web_service_url

    def still_owns(self, name: TopicName) -> bool:
        return (
            not self._leaving
            and self.session is not None
            and self.session.valid
            and self._bundle(name) in self.owned
        )

    # ------------------------------------------------------------------ unload

    async def unload(self, bundle: Bundle) -> str | None:
        """Hand a bundle this broker owns to the least-loaded other broker
        (or free it when there is none); its topics close first, so clients
        reconnect through LOOKUP. Returns the new owner's id, or None."""
        owner = await self.owner_of(bundle)
        if owner is None or not self.is_me(owner):
            self.owned.discard(bundle)
            return None
        brokers = await live_brokers(self.client, self.keys)
        target = least_loaded(
            bundle, brokers, await bundle_owners(self.client, self.keys), exclude=owner.broker_id
        )
        return await self._release(bundle, hand_to=target)

    async def _release(self, bundle: Bundle, hand_to: BrokerInfo | None) -> str | None:
        # Refuse new loads first, then close what is loaded (ledgers closed
        # and cursors persisted), and only then let anyone else in.
        self.owned.discard(bundle)
        self.metrics.bundles_released.inc()
        if self.service is not None:
            closed = await self.service.unload_topics(lambda n: self._bundle(n) == bundle)
            log.info("bundle unloading", bundle=str(bundle), topics=closed)
        key = self.keys.bundle(bundle)
        txn = self.client.transactions
        assert self.session is not None
        mine = BundleOwner.of(self.info).encode() if self.info is not None else b""
        if hand_to is not None:
            # The new owner's lease carries the key: it goes if that broker dies.
            ok, _ = await self.client.transaction(
                compare=[txn.value(key) == mine],
                success=[txn.put(key, BundleOwner.of(hand_to).encode(), lease=hand_to.lease)],
                failure=[],
            )
            if ok:
                log.info("bundle handed over", bundle=str(bundle), to=hand_to.broker_id)
                return hand_to.broker_id
        await self.client.transaction(
            compare=[txn.value(key) == mine], success=[txn.delete(key)], failure=[]
        )
        log.info("bundle released", bundle=str(bundle))
        return None

    def owner_info(self) -> dict[str, object]:
        """What this broker owns (admin and tests)."""
        return {
            "brokerId": self.info.broker_id if self.info is not None else "",
            "bundles": sorted(str(b) for b in self.owned),
            "topics": sorted(self.service.topics) if self.service is not None else [],
        }

    # ------------------------------------------------------------ session loss

    def _session_lost(self) -> None:
        if self._closed:
            return
        self.metrics.session_losses.inc()
        self._spawn(self._rejoin())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro, name="cluster-rejoin")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _rejoin(self) -> None:
        """Give everything up at once (another broker may own it by now), then
        join again with a new lease."""
        lost = self.session
        self.owned.clear()
        if self.service is not None:
            closed = await self.service.unload_topics(lambda _n: True)
            log.warning("session lost: topics closed", topics=closed)
        if lost is not None:
            await lost.close(revoke=False)
            # Everything is closed: free the old lease's bundles now rather
            # than when etcd expires it (it may still live if only our
            # keep-alives were lost).
            with contextlib.suppress(aetcd.exceptions.ClientError):
                await self.client.revoke_lease(lost.lease_id)
        delay = 0.2
        while not self._closed:
            try:
                await self.open_session()
                if self.info is not None:
                    await self._register()
                log.info("rejoined the cluster")
                return
            except aetcd.exceptions.ClientError as exc:
                log.warning("rejoining failed", error=repr(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
