"""Worker identity: registration issues a token; every call is authenticated by it."""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, or_, select, text, update

from swarm.context.schema import joined_workers, workers
from swarm.db import Database
from swarm.errors import Forbidden, NotFound, Unauthorized

TOKEN_PREFIX = "swt_"


@dataclass(frozen=True)
class Worker:
    id: int
    name: str


@dataclass(frozen=True)
class WorkerInfo:
    id: int
    name: str
    created_at: float
    model: str | None
    state: str
    status: dict[str, Any]
    heartbeat_at: float | None

    def liveness(self, now: float, timeout: float) -> str:
        """`dead` when a runtime stopped sending heartbeats without saying it stopped."""
        if self.state in ("stopped", "registered"):
            return self.state
        if self.heartbeat_at is None or now - self.heartbeat_at > timeout:
            return "dead"
        return self.state


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Registry:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock
        self._by_token: dict[str, Worker] = {}  # tokens never change, so caching is safe
        # Worker id -> when this hub last served a call of it (any API or git call), written to
        # `heartbeat_at` by `flush_activity`: a worker whose calls reach the hub is alive,
        # however late the hub, busy with 256 workers' calls, got to its heartbeat.
        self._activity: dict[int, float] = {}
        self._activity_lock = threading.Lock()

    def register(self, *, model: str | None = None, limit: int | None = None) -> tuple[Worker, str]:
        """A new worker and its token; `limit` (a join-token registration): refuse once the join
        token registered that many workers (the operator's registrations do not count)."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(24)
        with self.db.write() as conn:
            if limit is not None:
                if not self.db.is_sqlite:  # (SQLite's writes are serialized already)
                    conn.execute(text("SELECT pg_advisory_xact_lock(7300501)"))
                known = conn.execute(select(func.count()).select_from(joined_workers)).scalar_one()
                if int(known) >= limit:
                    raise Forbidden(
                        f"this run declared {limit} workers and all of them have registered; "
                        "the join token registers no more (the operator token can)"
                    )
            worker_id = conn.execute(
                insert(workers)
                .values(
                    name=f"pending-{uuid.uuid4().hex}",
                    token_hash=hash_token(token),
                    created_at=self.clock(),
                    model=model,
                )
                .returning(workers.c.id)
            ).scalar_one()
            name = f"w{worker_id}"
            conn.execute(update(workers).where(workers.c.id == worker_id).values(name=name))
            if limit is not None:
                conn.execute(insert(joined_workers).values(worker_id=worker_id))
        return Worker(worker_id, name), token

    def authenticate(self, token: str) -> Worker:
        worker = self._authenticate(token)
        with self._activity_lock:
            self._activity[worker.id] = self.clock()
        return worker

    def flush_activity(self) -> int:
        """Record the calls served since the last flush as heartbeats (one write for all);
        answers how many workers it recorded."""
        with self._activity_lock:
            seen, self._activity = self._activity, {}
        if not seen:
            return 0
        with self.db.write() as conn:
            for worker_id, at in seen.items():
                conn.execute(
                    update(workers)
                    .where(
                        workers.c.id == worker_id,
                        or_(workers.c.heartbeat_at.is_(None), workers.c.heartbeat_at < at),
                    )
                    .values(heartbeat_at=at)
                )
        return len(seen)

    def _authenticate(self, token: str) -> Worker:
        cached = self._by_token.get(token)
        if cached is not None:
            return cached
        with self.db.read() as conn:
            row = conn.execute(
                select(workers.c.id, workers.c.name).where(
                    workers.c.token_hash == hash_token(token)
                )
            ).first()
        if row is None:
            raise Unauthorized("unknown token: check SWARM_TOKEN (each worker gets its own)")
        worker = Worker(row.id, row.name)
        self._by_token[token] = worker
        return worker

    def by_name(self, name: str) -> Worker:
        with self.db.read() as conn:
            row = conn.execute(
                select(workers.c.id, workers.c.name).where(workers.c.name == name)
            ).first()
        if row is None:
            raise NotFound(f"no worker named {name!r}; `sw workers` lists them")
        return Worker(row.id, row.name)

    def report(self, worker: Worker, state: str, status: dict[str, Any]) -> None:
        with self.db.write() as conn:
            conn.execute(
                update(workers)
                .where(workers.c.id == worker.id)
                .values(state=state, status=json.dumps(status), heartbeat_at=self.clock())
            )

    def list(self) -> list[WorkerInfo]:
        with self.db.read() as conn:
            rows = conn.execute(select(workers).order_by(workers.c.id)).all()
        return [
            WorkerInfo(
                r.id, r.name, r.created_at, r.model, r.state, json.loads(r.status), r.heartbeat_at
            )
            for r in rows
        ]

    def count(self) -> int:
        with self.db.read() as conn:
            return int(conn.execute(select(func.count()).select_from(workers)).scalar_one())
