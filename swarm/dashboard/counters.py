"""Counts over the append-only tables, kept up to date incrementally.

Entries and messages are never updated or deleted and their ids are handed out in commit order,
so counting only the rows past the last id seen gives the exact totals without rescanning a
million rows on every poll."""

from __future__ import annotations

import heapq
import threading
from collections import Counter
from typing import Any

from sqlalchemy import Connection, Table, func, select

from swarm.context.schema import entries, workers
from swarm.messages.schema import messages


class AppendOnlyCounter:
    """Row counts of one append-only table grouped by some columns, refreshed by id window."""

    def __init__(self, table: Table, *keys: Any) -> None:
        self.table = table
        self.keys = keys
        self.last_id = 0
        self.lock = threading.Lock()  # held by callers while they read the totals

    def new_rows(self, conn: Connection) -> list[tuple[tuple[Any, ...], int, int]]:
        """(key, count, newest id) of the rows committed since the last call; hold `lock`."""
        head = int(conn.execute(select(func.coalesce(func.max(self.table.c.id), 0))).scalar_one())
        if head <= self.last_id:
            return []
        rows = conn.execute(
            select(*self.keys, func.count(), func.max(self.table.c.id))
            .where(self.table.c.id > self.last_id, self.table.c.id <= head)
            .group_by(*self.keys)
        ).all()
        self.last_id = head
        return [(tuple(key), int(n), int(newest)) for *key, n, newest in rows]


class RunCounters:
    """The dashboard's counters: entries by type and by author, messages, DM correspondents."""

    def __init__(self) -> None:
        self._entries = AppendOnlyCounter(entries, entries.c.type, entries.c.author_id)
        self._messages = AppendOnlyCounter(
            messages, messages.c.author, messages.c.recipient_id, messages.c.channel
        )
        self.by_type: Counter[str] = Counter()
        self.by_author: Counter[int] = Counter()
        self.channel = 0
        self.direct = 0
        # DM threads: (name, name) in sorted order -> [messages, newest id]
        self.threads: dict[tuple[str, str], list[int]] = {}
        self._names: dict[int, str] = {}  # worker names never change once registered

    def entry_counts(self, conn: Connection) -> tuple[dict[str, int], dict[int, int]]:
        """(count by type, count by author id)."""
        with self._entries.lock:
            for (kind, author), n, _newest in self._entries.new_rows(conn):
                self.by_type[kind] += n
                self.by_author[author] += n
            return dict(self.by_type), dict(self.by_author)

    def _messages_now(self, conn: Connection) -> None:
        rows = self._messages.new_rows(conn)
        unknown = {r for (_a, r, _c), _n, _new in rows if r is not None} - set(self._names)
        if unknown:
            found = conn.execute(
                select(workers.c.id, workers.c.name).where(workers.c.id.in_(unknown))
            )
            self._names.update((int(i), str(name)) for i, name in found)
        for (author, recipient, channel), n, newest in rows:
            if channel is not None:
                self.channel += n
            elif recipient is not None:
                self.direct += n
                other = self._names.get(recipient, "?")
                pair = (author, other) if author < other else (other, author)
                slot = self.threads.setdefault(pair, [0, 0])
                slot[0] += n
                slot[1] = max(slot[1], newest)

    def message_counts(self, conn: Connection) -> dict[str, int]:
        with self._messages.lock:
            self._messages_now(conn)
            return {"channel": self.channel, "direct": self.direct}

    def latest_threads(self, conn: Connection, limit: int) -> list[tuple[str, str, int, int]]:
        """The `limit` most recently active DM threads: (name, name, messages, newest id)."""
        with self._messages.lock:
            self._messages_now(conn)
            top = heapq.nlargest(limit, self.threads.items(), key=lambda kv: kv[1][1])
        return [(a, b, n, newest) for (a, b), (n, newest) in top]
