"""A ClientConnection for tests without sockets: it records the frames."""

from __future__ import annotations

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import FrameDecoder


class RecordingConnection:
    """A ClientConnection that keeps what would go on the socket."""

    def __init__(self, writable: bool = True) -> None:
        self.frames: list[bytes] = []
        self.writable = writable

    @property
    def address(self) -> str:
        return "test:0"

    @property
    def client_version(self) -> str:
        return "recording"

    @property
    def is_writable(self) -> bool:
        return self.writable

    def write_frames(self, frames: list[bytes]) -> None:
        self.frames.extend(frames)

    def publish_completed(self, size: int, count: int = 1) -> None:
        pass

    def producer_closed_by_broker(self, producer_id: int) -> None:
        pass

    def consumer_closed_by_broker(self, consumer_id: int) -> None:
        pass

    def active_consumer_changed(self, consumer_id: int, is_active: bool) -> None:
        pass

    def reached_end_of_topic(self, consumer_id: int) -> None:
        pass

    def messages(self) -> list[tuple[int, int, int]]:
        """(consumer id, entry id, redelivery count) of every MESSAGE so far."""
        decoder = FrameDecoder()
        decoder.feed(b"".join(self.frames))
        return [
            (
                f.command.message.consumer_id,
                f.command.message.message_id.entryId,
                f.command.message.redelivery_count,
            )
            for f in decoder
            if f.type == pb.BaseCommand.MESSAGE
        ]
