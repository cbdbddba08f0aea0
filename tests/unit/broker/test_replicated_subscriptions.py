"""Replicated subscriptions (issue 45.4): the marker codec against protobuf
messages with Pulsar's field numbers, and one topic's snapshot controller
driven by hand (a fake topic, an injected clock)."""

from __future__ import annotations

import asyncio
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from magnetar.broker.counters import RateCounter
from magnetar.broker.features.markers import (
    REPLICATED_PROPERTY,
    SNAPSHOT_REQUEST,
    SNAPSHOT_RESPONSE,
    SUBSCRIPTION_UPDATE,
    MarkerHorizon,
    SnapshotRequest,
    SnapshotResponse,
    SubscriptionUpdate,
    decode,
    encode,
    marker_entry,
    marker_type,
    parse_entry,
)
from magnetar.broker.replication.snapshots import (
    ReplicatedSubscriptions,
    Snapshot,
    SnapshotSettings,
)
from magnetar.broker.storage.api import LATEST, Position
from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import Payload

_F = descriptor_pb2.FieldDescriptorProto


def _marker_classes() -> dict[str, Any]:
    """PulsarMarkers' messages, declared from their field numbers."""
    file = descriptor_pb2.FileDescriptorProto(
        name="markers_under_test.proto", package="markers_under_test", syntax="proto2"
    )

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        declared = file.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            added = declared.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                added.type_name = f".markers_under_test.{type_name}"

    required, optional, repeated = _F.LABEL_REQUIRED, _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
    text, number, nested = _F.TYPE_STRING, _F.TYPE_UINT64, _F.TYPE_MESSAGE
    message(
        "MessageIdData",
        ("ledger_id", 1, number, required, ""),
        ("entry_id", 2, number, required, ""),
    )
    message(
        "ClusterMessageId",
        ("cluster", 1, text, required, ""),
        ("message_id", 2, nested, required, "MessageIdData"),
    )
    message(
        "Request", ("snapshot_id", 1, text, required, ""), ("source_cluster", 2, text, optional, "")
    )
    message(
        "Response",
        ("snapshot_id", 1, text, required, ""),
        ("cluster", 2, nested, optional, "ClusterMessageId"),
    )
    message(
        "Update",
        ("subscription_name", 1, text, required, ""),
        ("clusters", 2, nested, repeated, "ClusterMessageId"),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"markers_under_test.{name}")
        )
        for name in ("Request", "Response", "Update")
    }


def test_codec_matches_pulsar_markers() -> None:
    """Issue 45.4: request, response and update payloads are PulsarMarkers'
    messages (same bytes both ways)."""
    classes = _marker_classes()
    request = SnapshotRequest("snap-1", "a")
    parsed = classes["Request"].FromString(encode(request))
    assert (parsed.snapshot_id, parsed.source_cluster) == ("snap-1", "a")
    assert decode(SNAPSHOT_REQUEST, parsed.SerializeToString()) == request

    response = SnapshotResponse("snap-1", "b", Position(7, 300))
    parsed = classes["Response"].FromString(encode(response))
    assert parsed.cluster.cluster == "b"
    assert (parsed.cluster.message_id.ledger_id, parsed.cluster.message_id.entry_id) == (7, 300)
    assert decode(SNAPSHOT_RESPONSE, parsed.SerializeToString()) == response

    update = SubscriptionUpdate("s", {"b": Position(7, 3), "c": Position(1 << 40, 0)})
    parsed = classes["Update"].FromString(encode(update))
    assert parsed.subscription_name == "s"
    assert {
        c.cluster: (c.message_id.ledger_id, c.message_id.entry_id) for c in parsed.clusters
    } == {
        "b": (7, 3),
        "c": (1 << 40, 0),
    }
    assert decode(SUBSCRIPTION_UPDATE, parsed.SerializeToString()) == update


def test_marker_entries_are_recognised() -> None:
    """Issue 45.4: a marker entry carries marker_type and replicate_to; a
    message (even one with a deliver-at time) is no marker."""
    data = marker_entry(SnapshotRequest("x", "a"), ["b", "c"])
    assert marker_type(data) == SNAPSHOT_REQUEST
    metadata, marker = parse_entry(data)
    assert list(metadata.replicate_to) == ["b", "c"]
    assert marker == SnapshotRequest("x", "a")
    plain = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=5)
    plain.deliver_at_time = 1234
    assert marker_type(Payload.build(plain, b"hello").data) == 0


class _Cursor:
    def __init__(self, name: str, replicated: bool = True) -> None:
        self.name = name
        self.is_durable = True
        self.properties = {REPLICATED_PROPERTY: 1} if replicated else {}
        self.mark_delete_position = Position(1, -1)


class _Ledger:
    def __init__(self) -> None:
        self.cursors: list[_Cursor] = []
        self.last_confirmed_position = Position(1, -1)


class _Topic:
    """What the controller uses of a StoredTopic."""

    def __init__(self) -> None:
        self.name = "persistent://public/geo/t"
        self.is_closed = False
        self.marker_listener: Any = None
        self.marker_horizon = MarkerHorizon(Position(1, -1))
        self.published = RateCounter()
        self.ledger = _Ledger()
        self.written: list[bytes] = []

    def store(self, data: bytes) -> Position:
        self.ledger.last_confirmed_position = Position(1, len(self.written))
        self.written.append(data)
        self.published.add(1, len(data))
        return self.ledger.last_confirmed_position

    def append(self, data: bytes, num_messages: int) -> asyncio.Future[Position]:
        done: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        done.set_result(self.store(data))
        return done

    def markers(self) -> list[tuple[int, list[str], object]]:
        found: list[tuple[int, list[str], object]] = []
        for data in self.written:
            metadata, marker = parse_entry(data)
            if metadata.marker_type:
                found.append((int(metadata.marker_type), list(metadata.replicate_to), marker))
        return found


def _message(topic: _Topic) -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=5)
    topic.store(Payload.build(metadata, b"m").data)


async def test_snapshot_then_update_once() -> None:
    """Issue 45.4: a request goes to every remote when messages came; with
    two remotes the snapshot takes two rounds, the remotes' positions from
    the first, the local position where the last answer of the second is
    stored; a replicated subscription past it sends one
    update with the remotes' positions; no new request without new
    messages; a subscription that is not replicated sends nothing. The
    controller is idle exactly when its next period would write nothing."""
    now = [0.0]
    topic = _Topic()
    replicated, plain = _Cursor("s"), _Cursor("plain", replicated=False)
    topic.ledger.cursors = [replicated, plain]
    controller = ReplicatedSubscriptions(
        topic,  # type: ignore[arg-type]
        "a",
        SnapshotSettings(frequency_s=1.0, timeout_s=5.0, max_cached=2),
        clock=lambda: now[0],
    )
    controller.remotes = frozenset({"b", "c"})
    _message(topic)
    assert not controller.idle  # a request is due
    controller.tick()
    ((kind, targets, request),) = topic.markers()
    assert (kind, targets) == (SNAPSHOT_REQUEST, ["b", "c"])
    assert topic.marker_horizon.last == LATEST  # dispatch looks for markers everywhere
    assert isinstance(request, SnapshotRequest) and request.source_cluster == "a"
    controller.tick()
    assert len(topic.markers()) == 1  # one pending at a time
    assert not controller.idle

    answer_b = topic.store(
        marker_entry(SnapshotResponse(request.snapshot_id, "b", Position(7, 3)), ["a"])
    )
    controller.on_marker(answer_b, topic.written[-1])
    assert controller.snapshots == []
    answer_c = topic.store(
        marker_entry(SnapshotResponse(request.snapshot_id, "c", Position(9, 1)), ["a"])
    )
    controller.on_marker(answer_c, topic.written[-1])
    # Two remotes: a second round, whose last answer gives the local position.
    assert controller.snapshots == []
    assert topic.markers()[-1] == (SNAPSHOT_REQUEST, ["b", "c"], request)
    for cluster, there in (("c", Position(9, 20)), ("b", Position(7, 20))):
        stored = topic.store(
            marker_entry(SnapshotResponse(request.snapshot_id, cluster, there), ["a"])
        )
        controller.on_marker(stored, topic.written[-1])
    answer_c = stored
    assert controller.snapshots == [
        Snapshot(request.snapshot_id, answer_c, {"b": Position(7, 3), "c": Position(9, 1)})
    ]
    assert controller.idle  # no message since the request, no subscription past it

    replicated.mark_delete_position = answer_b
    plain.mark_delete_position = answer_c
    controller.tick()
    assert SUBSCRIPTION_UPDATE not in [m[0] for m in topic.markers()]  # not past it yet
    replicated.mark_delete_position = answer_c
    assert not controller.idle  # an update is due
    controller.tick()
    assert controller.idle
    controller.tick()
    updates = [m for m in topic.markers() if m[0] == SUBSCRIPTION_UPDATE]
    assert updates == [
        (
            SUBSCRIPTION_UPDATE,
            ["b", "c"],
            SubscriptionUpdate("s", {"b": Position(7, 3), "c": Position(9, 1)}),
        )
    ]
    assert [m[0] for m in topic.markers()].count(SNAPSHOT_REQUEST) == 2


async def test_timeout_and_answering() -> None:
    """Issue 45.4: a snapshot whose answers do not all come within the
    timeout (injected clock) is dropped, and a late answer completes
    nothing; a request from a remote is answered to it alone with this
    topic's last position."""
    now = [0.0]
    topic = _Topic()
    topic.ledger.cursors = [_Cursor("s")]
    controller = ReplicatedSubscriptions(
        topic,  # type: ignore[arg-type]
        "a",
        SnapshotSettings(frequency_s=1.0, timeout_s=5.0),
        clock=lambda: now[0],
    )
    controller.remotes = frozenset({"b"})
    _message(topic)
    controller.tick()
    first = topic.markers()[0][2]
    assert isinstance(first, SnapshotRequest)
    now[0] = 6.0
    _message(topic)
    controller.tick()  # the first timed out: a new request
    second = topic.markers()[-1][2]
    assert isinstance(second, SnapshotRequest) and second != first
    late = topic.store(
        marker_entry(SnapshotResponse(first.snapshot_id, "b", Position(3, 3)), ["a"])
    )
    controller.on_marker(late, topic.written[-1])
    assert controller.snapshots == []

    asked = topic.store(marker_entry(SnapshotRequest("from-b", "b"), ["a"]))
    controller.on_marker(asked, topic.written[-1])
    kind, targets, response = topic.markers()[-1]
    assert (kind, targets) == (SNAPSHOT_RESPONSE, ["b"])
    assert response == SnapshotResponse("from-b", "a", asked)


async def test_a_slow_subscription_keeps_its_next_snapshot() -> None:
    """Issue 45.4: beyond max_cached snapshots the oldest go, but not the
    newest nor a subscription's next one: a subscription far behind still
    sends its update when it passes that one."""
    topic = _Topic()
    slow = _Cursor("slow")
    topic.ledger.cursors = [slow]
    controller = ReplicatedSubscriptions(
        topic,  # type: ignore[arg-type]
        "a",
        SnapshotSettings(max_cached=2),
        clock=lambda: 0.0,
    )
    controller.remotes = frozenset({"b"})
    taken = []
    for round_ in range(4):
        _message(topic)
        controller.tick()
        request = topic.markers()[-1][2]
        assert isinstance(request, SnapshotRequest)
        answer = SnapshotResponse(request.snapshot_id, "b", Position(5, round_))
        stored = topic.store(marker_entry(answer, ["a"]))
        controller.on_marker(stored, topic.written[-1])
        taken.append(stored)
    controller.tick()
    assert [s.local for s in controller.snapshots] == [taken[0], taken[3]]
    slow.mark_delete_position = taken[0]
    controller.tick()
    updates = [m[2] for m in topic.markers() if m[0] == SUBSCRIPTION_UPDATE]
    assert updates == [SubscriptionUpdate("slow", {"b": Position(5, 0)})]
