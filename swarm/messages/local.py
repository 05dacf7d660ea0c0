"""Embedded messages: channel posts and DMs in the hub's database, with per-worker cursors."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Column, Row, and_, func, insert, or_, select, update
from sqlalchemy.orm import aliased

from swarm.context.schema import workers
from swarm.db import Database
from swarm.errors import InvalidInput
from swarm.messages.ports import TASKS_CHANNEL, ChannelDigest, Message, check_body
from swarm.messages.schema import messages
from swarm.registry import Worker

CHANNEL_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_")


class LocalMessages:
    def __init__(
        self, db: Database, *, clock: Callable[[], float] = time.time, size_limit: int = 4000
    ) -> None:
        self.db = db
        self.clock = clock
        self.size_limit = size_limit

    def _check(self, body: object) -> str:
        return check_body(body, self.size_limit)

    def _insert(self, author: Worker | str, body: str, **target: Any) -> Message:
        body = self._check(body)
        now = self.clock()
        author_id, author_name = (
            (author.id, author.name) if isinstance(author, Worker) else (None, author)
        )
        with self.db.write() as conn:
            message_id = conn.execute(
                insert(messages)
                .values(
                    created_at=now,
                    author_id=author_id,
                    author=author_name,
                    body=body,
                    channel=target.get("channel"),
                    recipient_id=target["recipient"].id if "recipient" in target else None,
                )
                .returning(messages.c.id)
            ).scalar_one()
        recipient = target["recipient"].name if "recipient" in target else None
        return Message(message_id, now, author_name, body, target.get("channel"), recipient)

    def post(self, author: Worker | str, body: str, channel: str = TASKS_CHANNEL) -> Message:
        if not channel or set(channel) - CHANNEL_NAME_CHARS:
            raise InvalidInput(f"bad channel name {channel!r}: use lower-case letters, digits, '-'")
        return self._insert(author, body, channel=channel)

    def direct(self, author: Worker | str, recipient: Worker, body: str) -> Message:
        if isinstance(author, Worker) and author.id == recipient.id:
            raise InvalidInput("a direct message to yourself; write a context entry instead")
        return self._insert(author, body, recipient=recipient)

    def _take(
        self, worker: Worker, cursor_column: Column[Any], where: Any, limit: int
    ) -> tuple[list[Message], int]:
        while True:
            with self.db.read() as conn:
                cursor = conn.execute(
                    select(cursor_column).where(workers.c.id == worker.id)
                ).scalar_one()
                head = conn.execute(select(func.coalesce(func.max(messages.c.id), 0))).scalar_one()
                if head <= cursor:
                    return [], 0
                window = (messages.c.id > cursor, messages.c.id <= head, where)
                rows = conn.execute(
                    MESSAGE_SELECT.where(*window).order_by(messages.c.id).limit(limit)
                ).all()
                more = 0
                if len(rows) == limit:
                    more = (
                        conn.execute(
                            select(func.count()).select_from(messages).where(*window)
                        ).scalar_one()
                        - limit
                    )
            new_cursor = rows[-1].id if more else head
            with self.db.write() as conn:
                moved = conn.execute(
                    update(workers)
                    .where(workers.c.id == worker.id, cursor_column == cursor)
                    .values({cursor_column.name: new_cursor})
                )
                if moved.rowcount != 1:
                    continue  # a concurrent call of this worker took them first
            return [message_from_row(r) for r in rows], int(more)

    def take_direct(self, worker: Worker) -> list[Message]:
        taken, _more = self._take(
            worker, workers.c.dm_cursor, messages.c.recipient_id == worker.id, 1000
        )
        return taken

    def take_channel(self, worker: Worker, limit: int = 50) -> ChannelDigest:
        others = or_(messages.c.author_id.is_(None), messages.c.author_id != worker.id)
        where = and_(messages.c.channel.is_not(None), others)
        taken, more = self._take(worker, workers.c.channel_cursor, where, limit)
        return ChannelDigest(tuple(taken), more)

    def history(
        self,
        *,
        channel: str | None = None,
        worker: Worker | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Message]:
        query = MESSAGE_SELECT.where(messages.c.id > after_id)
        if channel is not None:
            query = query.where(messages.c.channel == channel)
        if worker is not None:
            query = query.where(
                messages.c.channel.is_(None),
                or_(messages.c.recipient_id == worker.id, messages.c.author_id == worker.id),
            )
        with self.db.read() as conn:
            rows = conn.execute(query.order_by(messages.c.id).limit(min(limit, 1000))).all()
        return [message_from_row(r) for r in rows]


_recipient = aliased(workers)


# Messages with their recipient's name (None for channel posts); statements are immutable, so
# every query starts from it.
MESSAGE_SELECT: Any = select(messages, _recipient.c.name.label("recipient")).outerjoin(
    _recipient, _recipient.c.id == messages.c.recipient_id
)


def message_from_row(row: Row[Any]) -> Message:
    """A Message from a row of MESSAGE_SELECT."""
    return Message(row.id, row.created_at, row.author, row.body, row.channel, row.recipient)
