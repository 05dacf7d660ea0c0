"""Idempotency keys: a write retried by a client is applied once and answers the same.

`HubClient` sends an `Idempotency-Key` with every write and keeps it across retries. This pure
ASGI middleware remembers the answer to each (caller, key) once the write completed with a
status below 500, and answers a later request with the same key from memory instead of running
it again. The caller is the bearer token's hash, so one worker can never read another's answers.

The answers are kept in memory (the newest RECENT_LIMIT) and written to the
`idempotency_keys` table (kept an hour) by one thread in batches, so they survive a hub restart
without costing each write a transaction of its own. Only a request marked as a retry
(`Idempotency-Attempt` > 1) looks the key up in the database: a first attempt's key is new by
construction. A retry that arrives while the first attempt still runs waits for it. A hub
killed after a write committed and before its answer was stored runs the retry again; the
domain's own checks (an already merged PR, the same PR opened again) then answer for it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Float, Index, Integer, String, Table, Text, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from starlette.concurrency import run_in_threadpool

from swarm.db import Database, metadata
from swarm.diskfull import is_disk_full

log = logging.getLogger("swarm.hub.idempotency")

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# POSTs that change nothing, so running one again is harmless, and whose answers can be large
# (an oracle run's output, up to megabytes): never remembered.
NOT_REMEMBERED = frozenset({"/v1/oracle"})
KEY_LIMIT = 128
RECENT_LIMIT = 2048  # answers carry delivery blocks (up to tens of kB): a bounded few in memory
# A retry comes within a client's retry time (60 s) after its read timeout (300 s): an hour is
# ample, and keeps the table from growing with every write of a long run.
KEEP_SECONDS = 3600.0
PURGE_EVERY = 60.0
FLUSH_SECONDS = 0.05

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("caller", String(64), primary_key=True),  # sha256 of the Authorization header
    Column("key", String(KEY_LIMIT), primary_key=True),
    Column("method", String(8), nullable=False),
    Column("path", Text, nullable=False),
    Column("status", Integer, nullable=False),
    Column("content_type", String(100), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("idempotency_keys_by_time", "created_at"),
)


@dataclass(frozen=True)
class Stored:
    status: int
    content_type: str
    body: bytes


class AnswerStore:
    """Answers by (caller, key): recent ones in memory, all of them in the database."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.recent: OrderedDict[tuple[str, str], Stored] = OrderedDict()
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._full = False  # the last flush failed for a full disk (said once)
        self._thread = threading.Thread(target=self._flush_loop, name="idempotency", daemon=True)
        self._thread.start()

    def remember(self, ident: tuple[str, str], method: str, path: str, answer: Stored) -> None:
        with self._lock:
            self.recent[ident] = answer
            while len(self.recent) > RECENT_LIMIT:
                self.recent.popitem(last=False)
            self._pending.append(
                {
                    "caller": ident[0],
                    "key": ident[1],
                    "method": method,
                    "path": path[:2000],
                    "status": answer.status,
                    "content_type": answer.content_type,
                    "body": answer.body.decode("utf-8", errors="replace"),
                    "created_at": time.time(),
                }
            )
        self._wake.set()

    def lookup(self, ident: tuple[str, str]) -> Stored | None:
        with self._lock:
            found = self.recent.get(ident)
        if found is not None:
            return found
        with self.db.read() as conn:
            row = conn.execute(
                select(idempotency_keys).where(
                    idempotency_keys.c.caller == ident[0], idempotency_keys.c.key == ident[1]
                )
            ).first()
        if row is None:
            return None
        return Stored(row.status, row.content_type, row.body.encode())

    def _flush_loop(self) -> None:
        last_purge = time.monotonic()
        while not self._closed:
            self._wake.wait(1.0)
            self._wake.clear()
            time.sleep(FLUSH_SECONDS)  # let a burst of writes gather into one transaction
            self.flush()
            if time.monotonic() - last_purge > PURGE_EVERY:
                last_purge = time.monotonic()
                self._purge()

    def flush(self) -> None:
        with self._lock:
            rows, self._pending = self._pending, []
        if not rows:
            return
        insert = sqlite_insert if self.db.is_sqlite else pg_insert
        try:
            with self.db.write() as conn:
                conn.execute(insert(idempotency_keys).on_conflict_do_nothing(), rows)
        except Exception as exc:
            # A retry after a restart then runs again: the domain's checks answer for it.
            if not is_disk_full(exc):
                log.exception("could not store %d idempotency answers", len(rows))
            elif not self._full:  # once while the disk stays full, not a traceback a write
                log.warning("could not store idempotency answers: the disk is full (%s)", exc)
            self._full = is_disk_full(exc)
            return
        self._full = False

    def _purge(self) -> None:
        try:
            with self.db.write() as conn:
                conn.execute(
                    delete(idempotency_keys).where(
                        idempotency_keys.c.created_at < time.time() - KEEP_SECONDS
                    )
                )
        except Exception:
            log.exception("could not purge old idempotency answers")

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=5)
        self.flush()


class IdempotencyMiddleware:
    def __init__(self, app: Any, store: AnswerStore) -> None:
        self.app = app
        self.store = store
        self.inflight: dict[tuple[str, str], asyncio.Event] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in WRITES
            or scope["path"] in NOT_REMEMBERED
        ):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        raw_key = headers.get(b"idempotency-key")
        if not raw_key:
            await self.app(scope, receive, send)
            return
        key = raw_key.decode("latin-1").strip()
        if not key or len(key) > KEY_LIMIT or not key.isascii() or not key.isprintable():
            await _send(send, _refusal(key))
            return
        caller = hashlib.sha256(headers.get(b"authorization", b"")).hexdigest()
        ident = (caller, key)
        running = self.inflight.get(ident)
        retried = running is not None or headers.get(b"idempotency-attempt", b"1") != b"1"
        if running is not None:
            await running.wait()
        if retried:
            stored = await run_in_threadpool(self.store.lookup, ident)
            if stored is not None:
                await _send(send, stored, replay=True)
                return
        done = self.inflight[ident] = asyncio.Event()
        status = 500
        content_type = "application/json"
        chunks: list[bytes] = []

        async def capture(message: Any) -> None:
            nonlocal status, content_type
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", []):
                    if name.lower() == b"content-type":
                        content_type = value.decode("latin-1")
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, capture)
            if status < 500:
                answer = Stored(status, content_type, b"".join(chunks))
                self.store.remember(ident, scope["method"], scope["path"], answer)
        finally:
            del self.inflight[ident]
            done.set()


def _refusal(key: str) -> Stored:
    body = (
        '{"error": "the Idempotency-Key header must be 1 to 128 printable ASCII characters '
        '(e.g. a UUID)", "kind": "InvalidInput"}'
    )
    return Stored(422, "application/json", body.encode())


async def _send(send: Any, answer: Stored, *, replay: bool = False) -> None:
    headers = [
        (b"content-type", answer.content_type.encode("latin-1")),
        (b"content-length", str(len(answer.body)).encode()),
    ]
    if replay:
        headers.append((b"idempotent-replay", b"true"))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


def install(app: Any, db: Database) -> AnswerStore:
    store = AnswerStore(db)
    app.add_middleware(IdempotencyMiddleware, store=store)
    app.router.on_shutdown.append(store.close)
    app.state.idempotency = store
    return store
