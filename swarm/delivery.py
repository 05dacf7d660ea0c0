"""What is new for a worker: peers' entries (newest first, capped) and its direct messages.

Read and acknowledged in one transaction, with pre-built SQL, because every worker call pays for
it. Exactly-once holds on both engines: on SQLite writes are serialized; on PostgreSQL the
worker's row is locked (FOR NO KEY UPDATE), so two concurrent calls of one worker queue up, and ids
are commit-ordered (see swarm.db), so every id up to a visible head is already committed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, TextClause, bindparam, text

from swarm.context.model import Entry, EntryDelivery
from swarm.context.store import entry_from_values
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
# SQLite: statements that answer a row per worker answer one row of JSON instead. The sqlite3
# module releases the GIL for every row it steps to, and in a busy hub taking it back waits on
# the event loop: 250 rows took 110 ms instead of 0.1 ms while another thread ran Python
# (measured), and the group-commit writer reads hundreds of rows a batch.
_STATE_JSON = (
    "SELECT json_group_array(json_array(id, entry_cursor, dm_cursor, head, dm_head)) FROM ("
    + _STATE
    + ")"
)
# Newest first, a page at a time: each worker takes the first `cap` that are new to it and not
# its own, so one page usually serves a whole batch of workers.
_ENTRIES = (
    "SELECT e.id, e.created_at, e.author_id, w.name AS author, e.type, e.body, e.scope, e.refs "
    "FROM entries e JOIN workers w ON w.id = e.author_id "
    "WHERE e.id > :lo AND e.id <= :hi ORDER BY e.id DESC LIMIT :n"
)
ENTRIES = text(_ENTRIES)
ENTRIES_JSON = text(
    "SELECT json_group_array(json_array(id, created_at, author_id, author, type, body, scope, "
    f"refs)) FROM ({_ENTRIES})"
)
# How many were new to the workers that share a cursor (for "N more": the shown ones plus the
# rest): one range scan per distinct cursor, counted by author, so each worker's count is the
# total less its own. In a busy hub a batch's workers share one or two cursors (each batch moves
# all of them to the same head); a per-worker count scanned the same range once per worker.
COUNTS = text(
    "SELECT author_id, COUNT(*) AS n FROM entries WHERE id > :c AND id <= :h GROUP BY author_id"
)
COUNTS_JSON = text(
    "SELECT json_group_array(json_array(author_id, n)) FROM (SELECT author_id, COUNT(*) AS n "
    "FROM entries WHERE id > :c AND id <= :h GROUP BY author_id)"
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
    """Collects workers' delivery blocks; `with_messages` when DMs live in the same database.
    A run without the shared context (`entries` off) or without DMs (`dms` off, see
    swarm.switches) delivers none of them."""

    def __init__(
        self,
        db: Database,
        cap: int,
        *,
        with_messages: bool,
        entries: bool = True,
        dms: bool = True,
    ) -> None:
        self.db = db
        self.cap = cap
        self.entries = entries
        self.dms = dms
        self.with_messages = with_messages and dms
        self._state = _over_workers(_STATE, db.dialect)
        self._state_locked = _over_workers(
            _STATE_JSON if db.is_sqlite else _STATE_LOCKED, db.dialect
        )
        self._advance = _over_workers(_ADVANCE, db.dialect)

    def _pending(self, state: Any) -> bool:
        return bool(
            (self.entries and state.head > state.entry_cursor)
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
        got = dict.fromkeys(ids, EMPTY)
        behind: dict[int, int] = {}  # worker -> entry cursor, for those with entries to take
        dms: list[tuple[int, int, int]] = []  # (worker, dm cursor, dm head)
        head = 0
        for w, entry_cursor, dm_cursor, head, dm_head in self._rows(
            conn, self._state_locked, {"ws": ids}
        ):
            if self.entries and head > entry_cursor:
                behind[w] = entry_cursor
            if self.with_messages and dm_head > dm_cursor:
                dms.append((w, dm_cursor, dm_head))
        if not behind and not dms:
            return got
        shown = self._newest(conn, behind, head)
        counts = self._counts(
            conn, {w: behind[w] for w, rows in shown.items() if len(rows) == self.cap}, head
        )
        for w, cursor in behind.items():
            rows = shown[w]
            more = counts.get(w, len(rows)) - len(rows)
            got[w] = Delivery(EntryDelivery(rows, more, cursor + 1, head), ())
        for w, dm_cursor, dm_head in dms:
            window = {"w": w, "c": dm_cursor, "h": dm_head}
            messages = tuple(
                Message(r.id, r.created_at, r.author, r.body, None, r.recipient)
                for r in conn.execute(DMS, window).all()
            )
            conn.execute(ADVANCE_DMS, window)
            got[w] = Delivery(got[w].entries, messages)
        if behind:
            conn.execute(self._advance, {"h": head, "ws": list(behind)})
        return got

    def _newest(
        self, conn: Connection, behind: dict[int, int], head: int
    ) -> dict[int, tuple[Entry, ...]]:
        """Each worker's newest `cap` entries in (its cursor, head] that are not its own.

        Read newest first, a page at a time, until every worker has its `cap` or has reached its
        cursor. Workers that share a cursor and wrote none of the newest entries get the same
        tuple: in a busy hub that is nearly all of a batch."""
        if self.cap <= 0 or not behind:
            return dict.fromkeys(behind, ())
        groups: dict[int, list[int]] = {}  # cursor -> its workers, newest cursor first
        for w, cursor in sorted(behind.items(), key=lambda item: -item[1]):
            groups.setdefault(cursor, []).append(w)
        shown: dict[int, tuple[Entry, ...]] = {}
        page: list[tuple[int, Entry]] = []  # (author id, entry), newest first
        lo, hi, n = min(groups), head, 2 * self.cap  # 2 x cap: a worker skips only its own
        paged = ENTRIES_JSON if self.db.is_sqlite else ENTRIES
        while True:
            rows = self._rows(conn, paged, {"lo": lo, "hi": hi, "n": n})
            rows.sort(key=lambda row: -row[0])  # newest first (SQLite's aggregate keeps no order)
            page += [
                (author_id, entry_from_values(i, at, author, kind, body, scope, refs))
                for i, at, author_id, author, kind, body, scope, refs in rows
            ]
            exhausted = len(rows) < n  # the page reaches down to the lowest cursor
            for cursor, group in groups.items():
                newer = [pair for pair in page if pair[1].id > cursor]
                # Whether every entry newer than this cursor is in the page.
                reached = exhausted or len(newer) < len(page)
                common = tuple(e for _a, e in newer[: self.cap])
                authors = {a for a, _e in newer[: self.cap]}
                for w in group:
                    if w in shown:
                        continue
                    if w not in authors and (len(common) == self.cap or reached):
                        shown[w] = common
                        continue
                    mine = tuple(e for a, e in newer if a != w)[: self.cap]
                    if len(mine) == self.cap or reached:
                        shown[w] = mine
            if len(shown) == len(behind):
                return shown
            hi, n = page[-1][1].id - 1, 2 * n

    def _rows(self, conn: Connection, statement: TextClause, params: dict[str, Any]) -> list[Any]:
        """The rows of a statement; on SQLite its JSON form's one row, decoded (see _STATE_JSON)."""
        if self.db.is_sqlite:
            return list(json.loads(conn.execute(statement, params).scalar_one()))
        return list(conn.execute(statement, params).all())

    def _counts(self, conn: Connection, cursors: dict[int, int], head: int) -> dict[int, int]:
        """For each worker, how many entries in (its cursor, head] are not its own."""
        counts: dict[int, int] = {}
        for cursor in set(cursors.values()):
            counted = COUNTS_JSON if self.db.is_sqlite else COUNTS
            rows = self._rows(conn, counted, {"c": cursor, "h": head})
            by_author: dict[int, int] = {int(a): int(n) for a, n in rows}
            total = sum(by_author.values())
            for w, c in cursors.items():
                if c == cursor:
                    counts[w] = total - by_author.get(w, 0)
        return counts
