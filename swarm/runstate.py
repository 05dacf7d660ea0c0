"""A run's bookkeeping in the hub's database: sessions, checkpoints, flags, and a summary."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Connection, case, func, insert, select, update

from swarm.context.counts import claim_counts
from swarm.context.schema import entries, workers
from swarm.db import Database
from swarm.diskfull import SESSION_PREFIX
from swarm.errors import Forbidden, InvalidInput, NotFound
from swarm.evaluation.schema import checkpoint_results, checkpoints
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
    "lost",  # set by the hub: the worker died during the session (swarm.hub.liveness)
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
    status: str = "scored"


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
        status: str = "scored",
        tests: dict[str, str] | None = None,
    ) -> int:
        if passed < 0 or total < 0 or passed > total:
            raise InvalidInput(f"a checkpoint needs 0 <= passed <= total; got {passed}/{total}")
        with self.db.write() as conn:
            checkpoint_id = int(
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
            conn.execute(
                insert(checkpoint_results).values(
                    checkpoint_id=checkpoint_id, status=status, tests=json.dumps(tests or {})
                )
            )
            return checkpoint_id

    def checkpoints(self) -> list[CheckpointRow]:
        query = (
            select(checkpoints, checkpoint_results.c.status)
            .outerjoin(checkpoint_results, checkpoint_results.c.checkpoint_id == checkpoints.c.id)
            .order_by(checkpoints.c.time, checkpoints.c.id)
        )
        with self.db.read() as conn:
            return [
                CheckpointRow(r.id, r.time, r.commit, r.passed, r.total, r.duration, r.reason,
                              r.status or "scored")
                for r in conn.execute(query)
            ]  # fmt: skip

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
            failed = conn.execute(
                select(func.count()).select_from(sessions).where(sessions.c.ended == "error")
            ).scalar_one()
            # Failed by a full disk (swarm.worker.runtime marks them): they pass once space
            # returns, so they do not count as a setup that fails every session.
            disk_full = conn.execute(
                select(func.count())
                .select_from(sessions)
                .where(sessions.c.ended == "error", sessions.c.detail.startswith(SESSION_PREFIX))
            ).scalar_one()
            failing = _failing_workers(conn)
            message_counts = conn.execute(
                select(
                    func.sum(case((messages.c.channel.is_not(None), 1), else_=0)),
                    func.sum(case((messages.c.recipient_id.is_not(None), 1), else_=0)),
                )
            ).one()
            latest = conn.execute(
                select(checkpoints, checkpoint_results.c.status)
                .outerjoin(
                    checkpoint_results, checkpoint_results.c.checkpoint_id == checkpoints.c.id
                )
                .order_by(checkpoints.c.time.desc(), checkpoints.c.id.desc())
                .limit(1)
            ).first()
            worker_count = conn.execute(select(func.count()).select_from(workers)).scalar_one()
        return {
            "workers": int(worker_count),
            "entries": {k: int(v) for k, v in by_type.items()},
            "claims": claim_states,
            "sessions": {
                "total": int(totals[0]),
                "running": int(running),
                "failed": int(failed),
                "disk_full": int(disk_full),
                "succeeded": int(totals[0]) - int(running) - int(failed),
            },
            # Workers whose last session failed, with why: shown on the panel while it lasts.
            "failing": failing,
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
                    latest.status or "scored",
                )
            )
            if latest
            else None,
            "stop": self.stop_requested,
        }


def _failing_workers(conn: Connection, limit: int = 20) -> list[dict[str, str]]:
    """The workers whose most recent ended session ended in an error, with its detail."""
    last = (
        select(func.max(sessions.c.id).label("id"))
        .where(sessions.c.ended_at.is_not(None))
        .group_by(sessions.c.worker_id)
        .subquery()
    )
    rows = conn.execute(
        select(workers.c.name, sessions.c.detail)
        .join(last, last.c.id == sessions.c.id)
        .join(workers, workers.c.id == sessions.c.worker_id)
        .where(sessions.c.ended == "error")
        .order_by(workers.c.id)
        .limit(limit)
    ).all()
    return [{"worker": name, "detail": detail or "no detail"} for name, detail in rows]
