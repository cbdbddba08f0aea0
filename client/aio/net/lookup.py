"""Service URLs, topic lookup and partitioned-topic metadata.

`pulsar://host:port[,host2:port2]` (or `pulsar+ssl://`) looks up over the binary protocol: LOOKUP
answers Connect (here) or Redirect (ask that broker, up to 20 hops);
`http://host:port` (or `https://`) uses the REST endpoints the official client uses (WIRE
"HTTP the official client uses").
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp

from magnetar.client.aio.errors import (
    ConnectError,
    InvalidUrl,
    LookupError,
    PulsarException,
    TopicNotFound,
    from_server_error,
)
from magnetar.client.aio.net import commands
from magnetar.client.aio.net.pool import ConnectionPool
from magnetar.client.aio.net.security import Security
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.naming import TopicName

MAX_REDIRECTS = 20
_LOOKUP = pb.CommandLookupTopicResponse
_PARTITIONS = pb.CommandPartitionedTopicMetadataResponse


_DEFAULT_PORTS = {"pulsar": 6650, "pulsar+ssl": 6651, "http": 8080, "https": 8443}


@dataclass(frozen=True)
class ServiceUrl:
    scheme: str
    addresses: tuple[str, ...]

    @property
    def uses_tls(self) -> bool:
        return self.scheme in ("pulsar+ssl", "https")

    @classmethod
    def parse(cls, url: str) -> ServiceUrl:
        try:
            parts = urlsplit(url.strip())
        except ValueError as exc:
            raise InvalidUrl(f"invalid service URL {url!r}: {exc}") from exc
        scheme = parts.scheme
        if scheme not in _DEFAULT_PORTS:
            raise InvalidUrl(
                f"service URL {url!r}: scheme must be pulsar://, pulsar+ssl://, http:// or https://"
            )
        default_port = _DEFAULT_PORTS[scheme]
        addresses = []
        for host in parts.netloc.split(","):
            host = host.strip()
            if not host:
                continue
            if host.rsplit(":", 1)[-1].isdigit() and not host.endswith("]"):
                addresses.append(host)
            else:
                addresses.append(f"{host}:{default_port}")
        if not addresses:
            raise InvalidUrl(f"service URL {url!r} names no host")
        return cls(scheme, tuple(addresses))


def address_of(broker_url: str) -> str:
    """`pulsar://host:port/` -> `host:port`."""
    return ServiceUrl.parse(broker_url).addresses[0]


class LookupService(Protocol):
    async def get_broker(self, topic: TopicName) -> str:
        """The `host:port` of the broker serving `topic`."""
        ...

    async def get_partitioned_metadata(self, topic: TopicName) -> int:
        """The partition count (0: not partitioned)."""
        ...

    async def get_topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        """The namespace's topics (partitions by their names), by
        CommandGetTopicsOfNamespace.Mode."""
        ...

    async def close(self) -> None: ...


class BinaryLookupService:
    """Lookups over the binary protocol, through the pool's shared connections."""

    def __init__(self, service: ServiceUrl, pool: ConnectionPool, listener_name: str = "") -> None:
        self._service = service
        self._pool = pool
        self._listener_name = listener_name
        self._next_host = itertools.cycle(service.addresses)
        self._tls = pool.security.use_tls

    async def get_partitioned_metadata(self, topic: TopicName) -> int:
        address = next(self._next_host)
        cnx = await self._pool.get_connection(address)
        request_id = cnx.new_request_id()
        frame = await cnx.request(commands.partitioned_metadata(str(topic), request_id), request_id)
        response = frame.command.partitionMetadataResponse
        if response.response == _PARTITIONS.Failed:
            raise _failure(response.error, response.message, "partitioned metadata", topic)
        return int(response.partitions)

    async def get_topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        cnx = await self._pool.get_connection(next(self._next_host))
        request_id = cnx.new_request_id()
        frame = await cnx.request(
            commands.get_topics_of_namespace(namespace, mode, request_id), request_id
        )
        return list(frame.command.getTopicsOfNamespaceResponse.topics)

    async def get_broker(self, topic: TopicName) -> str:
        address = next(self._next_host)
        authoritative = False
        for _hop in range(MAX_REDIRECTS + 1):
            cnx = await self._pool.get_connection(address)
            request_id = cnx.new_request_id()
            frame = await cnx.request(
                commands.lookup(
                    str(topic),
                    request_id,
                    authoritative=authoritative,
                    listener_name=self._listener_name,
                ),
                request_id,
            )
            response = frame.command.lookupTopicResponse
            if response.response == _LOOKUP.Failed:
                raise _failure(response.error, response.message, "lookup", topic)
            url = response.brokerServiceUrlTls if self._tls else response.brokerServiceUrl
            if not url:
                raise LookupError(
                    f"lookup of {topic} answered without a broker URL"
                    + (" for TLS" if self._tls else ""),
                    retriable=False,
                )
            target = address_of(url)
            if response.response == _LOOKUP.Connect:
                # Behind a proxy the physical connection stays on the service URL.
                return address if response.proxy_through_service_url else target
            address = target
            authoritative = response.authoritative
        # A redirect loop is a broker misconfiguration: retrying would only loop again.
        raise LookupError(
            f"lookup of {topic} redirected more than {MAX_REDIRECTS} times", retriable=False
        )

    async def close(self) -> None:
        """Connections belong to the pool, which the client closes."""


def _failure(error: int, message: str, what: str, topic: TopicName) -> PulsarException:
    exc = from_server_error(error, message or f"{what} of {topic} failed")
    return exc


# Pulsar's header for the listener whose addresses an HTTP lookup answers with.
LISTENER_HEADER = "X-Pulsar-ListenerName"


class HttpLookupService:
    """Lookups over HTTP, as the official client does for http:// service URLs."""

    def __init__(
        self, service: ServiceUrl, timeout: float, security: Security, listener_name: str = ""
    ) -> None:
        self._service = service
        self._listener_name = listener_name
        self._next_host = itertools.cycle(service.addresses)
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._security = security
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            context = self._security.ssl_context()
            connector = aiohttp.TCPConnector(ssl=context) if context is not None else None
            self._session = aiohttp.ClientSession(timeout=self._timeout, connector=connector)
        return self._session

    async def _get_json(self, path: str) -> object:
        url = f"{self._service.scheme}://{next(self._next_host)}{path}"
        await self._security.prepare_auth()
        headers = self._security.http_headers()
        if self._listener_name:
            headers = {**headers, LISTENER_HEADER: self._listener_name}
        try:
            async with self._http().get(url, headers=headers) as response:
                if response.status == 404:
                    raise TopicNotFound(f"GET {url}: 404")
                if response.status in (401, 403):
                    # As the official client: an HTTP error status is a
                    # connect error, and asking again will not help.
                    raise ConnectError(f"GET {url}: HTTP {response.status}", retriable=False)
                if response.status >= 400:
                    raise LookupError(f"GET {url}: HTTP {response.status}")
                return await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ConnectError(f"GET {url}: {exc}") from exc

    async def get_partitioned_metadata(self, topic: TopicName) -> int:
        body = await self._get_json(
            f"/admin/v2/{topic.rest_path}/partitions?checkAllowAutoCreation=true"
        )
        if not isinstance(body, dict) or not isinstance(body.get("partitions"), int):
            raise LookupError(f"partitions of {topic}: unexpected answer {body!r}")
        return int(body["partitions"])

    async def get_topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        name = pb.CommandGetTopicsOfNamespace.Mode.Name(mode)  # type: ignore[arg-type]
        body = await self._get_json(f"/admin/v2/namespaces/{namespace}/topics?mode={name}")
        if not isinstance(body, list) or not all(isinstance(t, str) for t in body):
            raise LookupError(f"topics of {namespace}: unexpected answer {body!r}")
        return list(body)

    async def get_broker(self, topic: TopicName) -> str:
        body = await self._get_json(f"/lookup/v2/topic/{topic.rest_path}")
        key = "brokerUrlTls" if self._security.use_tls else "brokerUrl"
        if not isinstance(body, dict) or not isinstance(body.get(key), str) or not body[key]:
            raise LookupError(f"lookup of {topic}: no {key} in {body!r}", retriable=False)
        return address_of(body[key])

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def lookup_service_for(
    service: ServiceUrl, pool: ConnectionPool, timeout: float, listener_name: str = ""
) -> LookupService:
    """Lookups answer with the addresses of the broker's listener named
    `listener_name` (its advertised_listeners), or its default ones."""
    if service.scheme in ("pulsar", "pulsar+ssl"):
        return BinaryLookupService(service, pool, listener_name)
    return HttpLookupService(service, timeout, pool.security, listener_name)
