"""A run's bookkeeping in the hub's database: sessions, checkpoints, flags, and a summary."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import case, func, insert, select, update

from swarm.context.counts import claim_counts
from swarm.context.schema import entries, workers
from swarm.db import Database
from swarm.errors import Forbidden, InvalidInput, NotFound
from swarm.evaluation.schema import checkpoints
from swarm.messages.schema import messages
from swarm.worker.schema import run_flags, sessions

SESSION_ENDINGS = {
    "submitted",
    "step_limit",
    "cost_limit",
    "time_limit",
    "context_limit",
    "error",
    "stopped",
}


@dataclass(frozen=True)
class SessionRow:
    id: int
    worker: str
    number: int
    harness: str
    model: str | None
    started_at: float
    ended_at: float | None
    ended: str | None
    steps: int
    tokens_in: int
    tokens_out: int
    cost: float
    detail: str


@dataclass(frozen=True)
class CheckpointRow:
    id: int
    time: float
    commit: str
    passed: int
    total: int
    duration: float
    reason: str | None


class RunState:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock

    # sessions ---------------------------------------------------------------------------
    def start_session(self, worker_id: int, harness: str, model: str | None) -> tuple[int, int]:
        with self.db.write() as conn:
            number = conn.execute(
                select(func.coalesce(func.max(sessions.c.number), 0) + 1).where(
                    sessions.c.worker_id == worker_id
                )
            ).scalar_one()
            session_id = conn.execute(
                insert(sessions)
                .values(
                    worker_id=worker_id,
                    number=number,
                    harness=harness,
                    model=model,
                    started_at=self.clock(),
                    steps=0,
                    tokens_in=0,
                    tokens_out=0,
                    cost=0.0,
                    detail="",
                )
                .returning(sessions.c.id)
            ).scalar_one()
        return int(session_id), int(number)

    def end_session(
        self,
        worker_id: int,
        session_id: int,
        *,
        ended: str,
        steps: int,
        tokens_in: int,
        tokens_out: int,
        cost: float,
        detail: str = "",
    ) -> None:
        if ended not in SESSION_ENDINGS:
            raise InvalidInput(
                f"unknown session ending {ended!r}; one of {sorted(SESSION_ENDINGS)}"
            )
        if min(steps, tokens_in, tokens_out) < 0 or cost < 0:
            raise InvalidInput("steps, tokens and cost cannot be negative")
        with self.db.write() as conn:
            owner = conn.execute(
                select(sessions.c.worker_id).where(sessions.c.id == session_id)
            ).scalar_one_or_none()
            if owner is None:
                raise NotFound(f"no session {session_id}")
            if owner != worker_id:
                raise Forbidden(f"session {session_id} belongs to another worker")
            conn.execute(
                update(sessions)
                .where(sessions.c.id == session_id)
                .values(
                    ended_at=self.clock(),
                    ended=ended,
                    steps=steps,
                    tokens_in=tokens_in,
                    tokens_out=tokens_out,
                    cost=cost,
                    detail=detail[:4000],
                )
            )

    def sessions(self, worker_id: int | None = None, limit: int = 5000) -> list[SessionRow]:
        query = (
            select(sessions, workers.c.name.label("worker"))
            .join(workers, workers.c.id == sessions.c.worker_id)
            .order_by(sessions.c.id)
            .limit(limit)
        )
        if worker_id is not None:
            query = query.where(sessions.c.worker_id == worker_id)
        with self.db.read() as conn:
            return [
                SessionRow(
                    r.id,
                    r.worker,
                    r.number,
                    r.harness,
                    r.model,
                    r.started_at,
                    r.ended_at,
                    r.ended,
                    r.steps,
                    r.tokens_in,
                    r.tokens_out,
                    r.cost,
                    r.detail,
                )
                for r in conn.execute(query)
            ]

    # checkpoints --------------------------------------------------------------------------
    def record_checkpoint(
        self,
        *,
        time: float,
        commit: str,
        passed: int,
        total: int,
        duration: float = 0.0,
        reason: str | None = None,
    ) -> int:
        if passed < 0 or total < 0 or passed > total:
            raise InvalidInput(f"a checkpoint needs 0 <= passed <= total; got {passed}/{total}")
        with self.db.write() as conn:
            return int(
                conn.execute(
                    insert(checkpoints)
                    .values(
                        time=time,
                        commit=commit,
                        passed=passed,
                        total=total,
                        duration=duration,
                        reason=reason,
                    )
                    .returning(checkpoints.c.id)
                ).scalar_one()
            )

    def checkpoints(self) -> list[CheckpointRow]:
        with self.db.read() as conn:
            rows = conn.execute(select(checkpoints).order_by(checkpoints.c.time, checkpoints.c.id))
            return [
                CheckpointRow(r.id, r.time, r.commit, r.passed, r.total, r.duration, r.reason)
                for r in rows
            ]

    # flags ------------------------------------------------------------------------------
    def set_flag(self, key: str, value: str) -> None:
        with self.db.write() as conn:
            moved = conn.execute(
                update(run_flags)
                .where(run_flags.c.key == key)
                .values(value=value, set_at=self.clock())
            )
            if moved.rowcount == 0:
                conn.execute(insert(run_flags).values(key=key, value=value, set_at=self.clock()))

    def flags(self) -> dict[str, str]:
        with self.db.read() as conn:
            return {r.key: r.value for r in conn.execute(select(run_flags))}

    @property
    def stop_requested(self) -> bool:
        return self.flags().get("stop") == "1"

    # summary ----------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Counters for progress displays: cheap aggregate queries only."""
        now = self.clock()
        with self.db.read() as conn:
            by_type: dict[str, int] = dict(
                conn.execute(select(entries.c.type, func.count()).group_by(entries.c.type)).all()
            )
            claim_states = claim_counts(conn, now)
            totals = conn.execute(
                select(
                    func.count(),
                    func.coalesce(func.sum(sessions.c.tokens_in), 0),
                    func.coalesce(func.sum(sessions.c.tokens_out), 0),
                    func.coalesce(func.sum(sessions.c.cost), 0.0),
                )
            ).one()
            running = conn.execute(
                select(func.count()).select_from(sessions).where(sessions.c.ended_at.is_(None))
            ).scalar_one()
            message_counts = conn.execute(
                select(
                    func.sum(case((messages.c.channel.is_not(None), 1), else_=0)),
                    func.sum(case((messages.c.recipient_id.is_not(None), 1), else_=0)),
                )
            ).one()
            latest = conn.execute(
                select(checkpoints)
                .order_by(checkpoints.c.time.desc(), checkpoints.c.id.desc())
                .limit(1)
            ).first()
            worker_count = conn.execute(select(func.count()).select_from(workers)).scalar_one()
        return {
            "workers": int(worker_count),
            "entries": {k: int(v) for k, v in by_type.items()},
            "claims": claim_states,
            "sessions": {"total": int(totals[0]), "running": int(running)},
            "tokens_in": int(totals[1]),
            "tokens_out": int(totals[2]),
            "cost": float(totals[3]),
            "messages": {
                "channel": int(message_counts[0] or 0),
                "direct": int(message_counts[1] or 0),
            },
            "checkpoint": asdict(
                CheckpointRow(
                    latest.id,
                    latest.time,
                    latest.commit,
                    latest.passed,
                    latest.total,
                    latest.duration,
                    latest.reason,
                )
            )
            if latest
            else None,
            "stop": self.stop_requested,
        }
