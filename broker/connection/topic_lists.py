"""Topic list commands of one connection: GET_TOPICS_OF_NAMESPACE, and the
topic list watchers WATCH_TOPIC_LIST / WATCH_TOPIC_LIST_CLOSE (PIP-145,
broker side in topic_watchers.py)."""

from __future__ import annotations

from magnetar.broker import commands
from magnetar.broker.connection.context import CommandContext
from magnetar.broker.errors import BrokerServiceError, NotAllowedError, TopicNotFoundError
from magnetar.broker.resources import ResourceNotFound
from magnetar.broker.service.topic_list import filter_topics, topics_hash
from magnetar.broker.service.topic_watchers import InvalidPattern
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.errors import ServerError
from magnetar.proto.frames import Frame

_MODE = pb.CommandGetTopicsOfNamespace


class TopicListCommands:
    def __init__(self, cnx: CommandContext) -> None:
        self.cnx = cnx
        self.watcher_ids: set[int] = set()

    async def _authorize_namespace(self, namespace: str) -> None:
        authorization = self.cnx.service.authorization
        if authorization is None:
            return
        role = self.cnx.role or ""
        tenant, _, local = namespace.partition("/")
        if not await authorization.allowed(role, "", tenant, local):
            raise BrokerServiceError(
                ServerError.AuthorizationError,
                f"role {role!r} may not list the topics of {namespace}",
            )

    async def _list(self, namespace: str, domains: tuple[str, ...]) -> list[str]:
        try:
            return await self.cnx.service.topics_of_namespace(namespace, domains)
        except ResourceNotFound as exc:
            raise TopicNotFoundError(str(exc)) from exc

    # -------------------------------------------------- GET_TOPICS_OF_NAMESPACE

    def handle_topics_of_namespace(self, frame: Frame) -> None:
        cmd = frame.command.getTopicsOfNamespace
        self.cnx.spawn(self._topics_of_namespace(cmd), cmd.request_id, "GET_TOPICS_OF_NAMESPACE")

    async def _topics_of_namespace(self, cmd: pb.CommandGetTopicsOfNamespace) -> None:
        domains = {
            _MODE.PERSISTENT: ("persistent",),
            _MODE.NON_PERSISTENT: ("non-persistent",),
        }.get(cmd.mode, ("persistent", "non-persistent"))
        await self._authorize_namespace(cmd.namespace)
        topics = await self._list(cmd.namespace, domains)
        filtered = None
        if cmd.topics_pattern:
            filtered = filter_topics(topics, cmd.topics_pattern)
        listed = topics if filtered is None else filtered
        digest = topics_hash(listed)
        unchanged = bool(cmd.topics_hash) and cmd.topics_hash == digest
        self.cnx.log.debug(
            "topics of namespace",
            namespace=cmd.namespace,
            mode=cmd.mode,
            pattern=cmd.topics_pattern,
            topics=len(listed),
            changed=not unchanged,
        )
        self.cnx.write(
            commands.topics_of_namespace(
                cmd.request_id,
                [] if unchanged else listed,
                filtered=filtered is not None,
                topics_hash=digest,
                changed=not unchanged,
            )
        )

    # ------------------------------------------------------ topic list watchers

    def handle_watch_topic_list(self, frame: Frame) -> None:
        cmd = frame.command.watchTopicList
        self.cnx.spawn(self._watch(cmd), cmd.request_id, "WATCH_TOPIC_LIST")

    async def _watch(self, cmd: pb.CommandWatchTopicList) -> None:
        await self._authorize_namespace(cmd.namespace)
        try:
            topics, digest = await self.cnx.service.topic_watchers.watch(
                self.cnx, cmd.watcher_id, cmd.namespace, cmd.topics_pattern
            )
        except InvalidPattern as exc:
            raise NotAllowedError(str(exc)) from exc
        except ResourceNotFound as exc:  # an unknown namespace, as a listing answers
            raise TopicNotFoundError(str(exc)) from exc
        if self.cnx.is_closed:  # closed while listing: forget it again
            self.cnx.service.topic_watchers.close(self.cnx, cmd.watcher_id)
            return
        self.watcher_ids.add(cmd.watcher_id)
        self.cnx.log.debug(
            "topic list watcher",
            watcher_id=cmd.watcher_id,
            namespace=cmd.namespace,
            pattern=cmd.topics_pattern,
            topics=len(topics),
        )
        self.cnx.write(
            commands.watch_topic_list_success(cmd.request_id, cmd.watcher_id, topics, digest)
        )

    def handle_watch_topic_list_close(self, frame: Frame) -> None:
        cmd = frame.command.watchTopicListClose
        self.cnx.service.topic_watchers.close(self.cnx, cmd.watcher_id)
        self.watcher_ids.discard(cmd.watcher_id)
        self.cnx.write(commands.success(cmd.request_id))

    def detach_all(self) -> None:
        if self.watcher_ids:
            self.cnx.service.topic_watchers.connection_closed(self.cnx)
            self.watcher_ids.clear()
