"""What is new for a worker: peers' entries (newest first, capped) and its direct messages.

Read and acknowledged in one transaction, with pre-built SQL, because every worker call pays for
it. Exactly-once holds on both engines: on SQLite writes are serialized; on PostgreSQL the
worker's row is locked (FOR NO KEY UPDATE), so two concurrent calls of one worker queue up, and ids
are commit-ordered (see swarm.db), so every id up to a visible head is already committed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, TextClause, bindparam, text

from swarm.context.model import Entry, EntryDelivery
from swarm.context.store import entry_from_row
from swarm.db import Database
from swarm.messages.ports import Message

# Statements over a set of workers take their ids as one array on PostgreSQL (psycopg parses a
# statement with more than 50 parameters anew on every call) and as an expanded IN list on
# SQLite (in-process: a long statement costs nothing to send).
_IDS = {"sqlite": "IN :ws", "postgresql": "= ANY(CAST(:ws AS bigint[]))"}

# One row per worker: its cursors and the heads they are compared with.
_STATE = """
SELECT id, entry_cursor, dm_cursor,
       (SELECT COALESCE(MAX(id), 0) FROM entries) AS head,
       (SELECT COALESCE(MAX(m.id), 0) FROM messages m WHERE m.recipient_id = workers.id) AS dm_head
FROM workers WHERE id {ids} ORDER BY id
"""
# On PostgreSQL the rows are locked FOR NO KEY UPDATE: that serializes one worker's calls
# without blocking foreign-key checks on its row (a DM to this worker, an entry it authors in
# another transaction). Rows are locked in id order, so two transactions that lock several never
# deadlock. (SQLite serializes writers anyway.)
_STATE_LOCKED = _STATE + " FOR NO KEY UPDATE"
# Newest first, a page at a time: each worker takes the first `cap` that are new to it and not
# its own, so one page usually serves a whole batch of workers.
ENTRIES = text(
    "SELECT e.id, e.created_at, e.author_id, w.name AS author, e.type, e.body, e.scope, e.refs "
    "FROM entries e JOIN workers w ON w.id = e.author_id "
    "WHERE e.id > :lo AND e.id <= :hi ORDER BY e.id DESC LIMIT :n"
)
# How many were new to each worker (for "N more": the shown ones plus the rest). A correlated
# count is an index range scan per worker on both engines; the same count written as a join was
# planned by PostgreSQL as a scan of the whole table (27 ms at 10,000 entries, growing).
_COUNTS = (
    "SELECT w.id, (SELECT COUNT(*) FROM entries e WHERE e.id > w.entry_cursor AND e.id <= :h "
    "AND e.author_id <> w.id) AS n FROM workers w WHERE w.id {ids}"
)
DMS = text(
    "SELECT m.id, m.created_at, m.author, m.body, w.name AS recipient FROM messages m "
    "JOIN workers w ON w.id = m.recipient_id "
    "WHERE m.recipient_id = :w AND m.id > :c AND m.id <= :h ORDER BY m.id"
)
# Everyone in a batch moves to the same head: one statement, whatever their number.
_ADVANCE = "UPDATE workers SET entry_cursor = :h WHERE id {ids}"
ADVANCE_DMS = text("UPDATE workers SET dm_cursor = :h WHERE id = :w")


def _over_workers(sql: str, dialect: str) -> TextClause:
    statement = text(sql.format(ids=_IDS[dialect]))
    return (
        statement.bindparams(bindparam("ws", expanding=True)) if dialect == "sqlite" else statement
    )


@dataclass(frozen=True)
class Delivery:
    entries: EntryDelivery
    messages: tuple[Message, ...]


EMPTY = Delivery(EntryDelivery(), ())


class Deliverer:
    """Collects workers' delivery blocks; `with_messages` when DMs live in the same database."""

    def __init__(self, db: Database, cap: int, *, with_messages: bool) -> None:
        self.db = db
        self.cap = cap
        self.with_messages = with_messages
        self._state = _over_workers(_STATE, db.dialect)
        self._state_locked = _over_workers(_STATE if db.is_sqlite else _STATE_LOCKED, db.dialect)
        self._counts = _over_workers(_COUNTS, db.dialect)
        self._advance = _over_workers(_ADVANCE, db.dialect)

    def _pending(self, state: Any) -> bool:
        return bool(
            state.head > state.entry_cursor
            or (self.with_messages and state.dm_head > state.dm_cursor)
        )

    def collect(self, worker_id: int) -> Delivery:
        """Take what is new for one worker, in a transaction of its own."""
        with self.db.read() as reader:
            state = reader.execute(self._state, {"ws": [worker_id]}).one()
        if not self._pending(state):
            return EMPTY  # the common idle case costs one read and no write
        with self.db.write() as writer:
            return self.collect_many(writer, [worker_id])[worker_id]

    def collect_many(self, conn: Connection, worker_ids: Iterable[int]) -> dict[int, Delivery]:
        """Take what is new for several workers at once, in the caller's write transaction: a
        handful of statements whatever their number (the hub's group commit uses this)."""
        ids = sorted(set(worker_ids))
        states = [s for s in conn.execute(self._state_locked, {"ws": ids}) if self._pending(s)]
        got = dict.fromkeys(ids, EMPTY)
        if not states:
            return got
        head = int(states[0].head)
        behind = {int(s.id): int(s.entry_cursor) for s in states if head > s.entry_cursor}
        shown = self._newest(conn, behind, head)
        full = [w for w, rows in shown.items() if len(rows) == self.cap]
        counts: dict[int, int] = {}
        if full:
            counts = {
                int(r.id): int(r.n) for r in conn.execute(self._counts, {"h": head, "ws": full})
            }
        for s in states:
            w = int(s.id)
            entries = EntryDelivery()
            if w in behind:
                rows = tuple(shown[w])
                more = counts.get(w, len(rows)) - len(rows)
                entries = EntryDelivery(rows, more, behind[w] + 1, head)
            messages: tuple[Message, ...] = ()
            if self.with_messages and s.dm_head > s.dm_cursor:
                window = {"w": w, "c": s.dm_cursor, "h": s.dm_head}
                messages = tuple(
                    Message(r.id, r.created_at, r.author, r.body, None, r.recipient)
                    for r in conn.execute(DMS, window)
                )
                conn.execute(ADVANCE_DMS, window)
            got[w] = Delivery(entries, messages)
        if behind:
            conn.execute(self._advance, {"h": head, "ws": list(behind)})
        return got

    def _newest(
        self, conn: Connection, behind: dict[int, int], head: int
    ) -> dict[int, list[Entry]]:
        """Each worker's newest `cap` entries in (its cursor, head] that are not its own."""
        shown: dict[int, list[Entry]] = {w: [] for w in behind}
        if self.cap <= 0 or not behind:
            return shown
        wanting = dict(behind)  # worker -> cursor, while it still wants entries
        lo, hi = min(behind.values()), head
        page = self.cap + len(behind)  # enough unless workers skip many of their own
        while wanting and hi > lo:
            rows = conn.execute(ENTRIES, {"lo": lo, "hi": hi, "n": page}).all()
            for row in rows:
                entry: Entry | None = None
                for w, cursor in list(wanting.items()):
                    if row.id <= cursor:
                        del wanting[w]  # reached its cursor: nothing older is new to it
                    elif row.author_id != w:
                        entry = entry or entry_from_row(row)
                        shown[w].append(entry)
                        if len(shown[w]) == self.cap:
                            del wanting[w]
                if not wanting:
                    break
            if len(rows) < page:
                break
            hi = int(rows[-1].id) - 1
            page *= 2
        return shown
