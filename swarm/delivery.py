"""What is new for a worker: peers' entries (newest first, capped) and its direct messages.

Read and acknowledged in one transaction, with pre-built SQL, because every worker call pays for
it. Exactly-once holds on both engines: on SQLite writes are serialized; on PostgreSQL the
worker's row is locked (FOR NO KEY UPDATE), so two concurrent calls of one worker queue up, and ids
are commit-ordered (see swarm.db), so every id up to a visible head is already committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from swarm.context.model import Entry, EntryDelivery
from swarm.context.store import entry_from_row
from swarm.db import Database
from swarm.messages.ports import Message

_STATE = """
SELECT entry_cursor, dm_cursor,
       (SELECT COALESCE(MAX(id), 0) FROM entries) AS head,
       (SELECT COALESCE(MAX(id), 0) FROM messages WHERE recipient_id = :w) AS dm_head
FROM workers WHERE id = :w
"""
STATE = text(_STATE)
# NO KEY UPDATE: serializes one worker's calls without blocking foreign-key checks on its row
# (a DM to this worker, an entry it authors in another transaction).
STATE_LOCKED = text(_STATE + " FOR NO KEY UPDATE")
ENTRIES = text(
    "SELECT e.id, e.created_at, w.name AS author, e.type, e.body, e.scope, e.refs "
    "FROM entries e JOIN workers w ON w.id = e.author_id "
    "WHERE e.id > :c AND e.id <= :h AND e.author_id <> :w ORDER BY e.id DESC LIMIT :cap"
)
COUNT = text("SELECT COUNT(*) FROM entries WHERE id > :c AND id <= :h AND author_id <> :w")
DMS = text(
    "SELECT m.id, m.created_at, m.author, m.body, w.name AS recipient FROM messages m "
    "JOIN workers w ON w.id = m.recipient_id "
    "WHERE m.recipient_id = :w AND m.id > :c AND m.id <= :h ORDER BY m.id"
)
ADVANCE = text("UPDATE workers SET entry_cursor = :h, dm_cursor = :dh WHERE id = :w")


@dataclass(frozen=True)
class Delivery:
    entries: EntryDelivery
    messages: tuple[Message, ...]


EMPTY = Delivery(EntryDelivery(), ())


class Deliverer:
    """Collects a worker's delivery block; `with_messages` when DMs live in the same database."""

    def __init__(self, db: Database, cap: int, *, with_messages: bool) -> None:
        self.db = db
        self.cap = cap
        self.with_messages = with_messages

    def _pending(self, state: Any) -> bool:
        return bool(
            state.head > state.entry_cursor
            or (self.with_messages and state.dm_head > state.dm_cursor)
        )

    def collect(self, worker_id: int, conn: Connection | None = None) -> Delivery:
        """Take what is new; inside `conn` (a write transaction) when the caller has one."""
        if conn is not None:
            return self._collect(conn, worker_id)
        with self.db.read() as reader:
            state = reader.execute(STATE, {"w": worker_id}).one()
        if not self._pending(state):
            return EMPTY  # the common idle case costs one read and no write
        with self.db.write() as writer:
            return self._collect(writer, worker_id)

    def _collect(self, conn: Connection, worker_id: int) -> Delivery:
        locked = STATE if self.db.is_sqlite else STATE_LOCKED
        state = conn.execute(locked, {"w": worker_id}).one()
        if not self._pending(state):
            return EMPTY
        cursor, head = int(state.entry_cursor), int(state.head)
        shown: tuple[Entry, ...] = ()
        more = 0
        if head > cursor:
            window = {"c": cursor, "h": head, "w": worker_id}
            if self.cap > 0:
                rows = conn.execute(ENTRIES, {**window, "cap": self.cap}).all()
                shown = tuple(entry_from_row(r) for r in rows)
            if len(shown) == self.cap:
                more = int(conn.execute(COUNT, window).scalar_one()) - len(shown)
        messages: tuple[Message, ...] = ()
        dm_head = int(state.dm_cursor)
        if self.with_messages and state.dm_head > state.dm_cursor:
            dm_head = int(state.dm_head)
            rows = conn.execute(DMS, {"w": worker_id, "c": state.dm_cursor, "h": dm_head}).all()
            messages = tuple(
                Message(r.id, r.created_at, r.author, r.body, None, r.recipient) for r in rows
            )
        conn.execute(ADVANCE, {"h": max(head, cursor), "dh": dm_head, "w": worker_id})
        entries = EntryDelivery(shown, more, cursor + 1, head) if head > cursor else EntryDelivery()
        return Delivery(entries, messages)
