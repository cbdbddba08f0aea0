"""Model-based test: random interleavings of add / ack / mark-delete / batch-index ack /
read / rewind / restart against a plain in-memory model (SEM-3.1, 3.2, 3.3, 5.2, 5.3).

The model numbers entries 0, 1, 2, ... and keeps a set of acked indexes, the
still-unacked bitsets and the read index; the real cursor must agree on what is
acked and on what it delivers next, across ledger rollovers and restarts.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Coroutine
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from magnetar.broker.storage import (
    FileManagedLedgerFactory,
    InitialPosition,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerConfig,
    Position,
    SyncPolicy,
)

T = TypeVar("T")
NAME = "public/default/persistent/model"
BATCH = 4  # messages per entry, for batch-index acks
CONFIG = ManagedLedgerConfig(
    sync_policy=SyncPolicy.NONE,
    max_segment_size=1024,  # a rollover every few entries
    cursor_persist_interval_s=3600,  # only close/flush persist: restart tests both
)


def _payload(i: int) -> bytes:
    return b"%06d" % i + b"." * 150


class CursorModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.mkdtemp(prefix="magnetar-model-")
        self.positions: list[Position] = []
        self.acked: set[int] = set()
        self.bitsets: dict[int, int] = {}
        self.read_index = 0
        self._open()

    # ----------------------------------------------------------------- plumbing

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def _open(self) -> None:
        async def go() -> tuple[FileManagedLedgerFactory, ManagedLedger, ManagedCursor]:
            f = await FileManagedLedgerFactory.create(self.dir, CONFIG)
            ml = await f.open(NAME)
            c = await ml.open_cursor("sub", InitialPosition.EARLIEST)
            return f, ml, c

        self.factory, self.ml, self.cursor = self.run(go())

    def teardown(self) -> None:
        try:
            self.run(self.factory.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _prefix(self) -> int:
        n = 0
        while n in self.acked:
            n += 1
        return n

    def _ack(self, i: int) -> None:
        self.acked.add(i)
        self.bitsets.pop(i, None)

    # -------------------------------------------------------------------- rules

    @rule(n=st.integers(1, 6))
    def add(self, n: int) -> None:
        async def go() -> list[Position]:
            return list(
                await asyncio.gather(
                    *[self.ml.add_entry(_payload(len(self.positions) + k), BATCH) for k in range(n)]
                )
            )

        new = self.run(go())
        assert new == sorted(new) and (not self.positions or new[0] > self.positions[-1])
        self.positions.extend(new)

    @precondition(lambda self: self.positions)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        picks = data.draw(st.lists(st.integers(0, len(self.positions) - 1), min_size=1, max_size=5))
        self.cursor.delete([self.positions[i] for i in picks])
        for i in picks:
            self._ack(i)

    @precondition(lambda self: self.positions)
    @rule(data=st.data())
    def mark_delete(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.positions) - 1))
        self.cursor.mark_delete(self.positions[i])
        for k in range(i + 1):
            self._ack(k)
        self.read_index = max(self.read_index, self._prefix())

    @precondition(lambda self: self.positions)
    @rule(data=st.data(), mask=st.integers(0, (1 << BATCH) - 1))
    def ack_batch_indexes(self, data: st.DataObject, mask: int) -> None:
        i = data.draw(st.integers(0, len(self.positions) - 1))
        self.cursor.delete_batch_indexes(self.positions[i], [mask])
        if i in self.acked:
            return
        bits = self.bitsets.get(i, mask) & mask
        if bits == 0:
            self._ack(i)
        else:
            self.bitsets[i] = bits
        self.read_index = max(self.read_index, self._prefix())

    @rule(k=st.integers(1, 8))
    def read(self, k: int) -> None:
        got = self.run(self.cursor.read_entries(k))
        expected = [i for i in range(self.read_index, len(self.positions)) if i not in self.acked][
            :k
        ]
        assert [e.position for e in got] == [self.positions[i] for i in expected]
        assert [e.data for e in got] == [_payload(i) for i in expected]
        self.read_index = expected[-1] + 1 if expected else len(self.positions)

    @rule()
    def rewind(self) -> None:
        self.cursor.rewind()
        self.read_index = self._prefix()

    @rule()
    def restart(self) -> None:
        self.run(self.factory.close())
        self._open()
        self.read_index = self._prefix()  # recovery rewinds to the first unacked

    @rule()
    def flush_then_restart(self) -> None:
        """Acks flushed explicitly survive like acks persisted by close."""
        self.run(self.cursor.flush())
        self.restart()

    # --------------------------------------------------------------- invariants

    @invariant()
    def acked_positions_agree(self) -> None:
        for i, pos in enumerate(self.positions):
            assert self.cursor.is_deleted(pos) == (i in self.acked), (i, pos)
            expected = self.bitsets.get(i)
            got = self.cursor.get_batch_ack_set(pos)
            assert got == (None if expected is None else [expected]), (i, got, expected)

    @invariant()
    def mark_delete_agrees(self) -> None:
        prefix = self._prefix()
        md = self.cursor.mark_delete_position
        if prefix:
            assert md == self.positions[prefix - 1]
        if prefix < len(self.positions):
            assert md < self.positions[prefix]

    @invariant()
    def backlog_agrees(self) -> None:
        unacked = len(self.positions) - len(self.acked)
        assert self.cursor.backlog_entries == unacked
        assert self.cursor.backlog_messages == unacked * BATCH


CursorModel.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCursorModel = CursorModel.TestCase
