"""The dashboard's reads: paged, indexed queries over the run's tables (no full scan per poll)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, and_, case, func, or_, select

from swarm.context.counts import claim_counts
from swarm.context.schema import claims, entries, workers
from swarm.context.store import ENTRY_SELECT, entry_from_row
from swarm.dashboard.counters import RunCounters
from swarm.db import Database
from swarm.evaluation.schema import checkpoint_results, checkpoints
from swarm.hub import serialize
from swarm.messages.local import MESSAGE_SELECT, message_from_row
from swarm.messages.schema import messages
from swarm.report.overlap import overlapping_claims
from swarm.report.runinfo import read_run_info
from swarm.worker.schema import sessions
from swarm.workspace.schema import pr_events, pull_requests

PAGE = 100
MAX_PAGE = 500


def page_size(limit: int | None) -> int:
    return max(1, min(limit or PAGE, MAX_PAGE))


def liveness(state: str, heartbeat_at: float | None, now: float, timeout: float) -> str:
    """idle / in_session / stopped / dead, as the roster reports it."""
    if state in ("stopped", "registered"):
        return state
    if heartbeat_at is None or now - heartbeat_at > timeout:
        return "dead"
    return state


def _entry(row: Any) -> dict[str, Any]:
    return serialize.entry(entry_from_row(row))


def _message(row: Any) -> dict[str, Any]:
    return serialize.message(message_from_row(row))


def _claim(row: Any, now: float) -> dict[str, Any]:
    state = row.end_reason or ("active" if row.lease_until > now else "lapsed")
    return {
        "id": row.id,
        "owner": row.owner,
        "scope": row.scope.split("\n") if row.scope else [],
        "body": row.body,
        "created": row.created_at,
        "lease_until": row.lease_until,
        "ended_at": row.ended_at,
        "ended_by": row.ended_by,
        "state": state,
    }


CLAIM_SELECT = (
    select(claims, workers.c.name.label("owner"), entries.c.body.label("body"))
    .join(workers, workers.c.id == claims.c.owner_id)
    .join(entries, entries.c.id == claims.c.id)
)


class DashboardQueries:
    """Read-only views of one run's database, shaped for the dashboard's pages."""

    def __init__(
        self,
        db: Database,
        *,
        run_dir: Path,
        clock: Callable[[], float],
        heartbeat_timeout: float = 60.0,
    ) -> None:
        self.db = db
        self.run_dir = run_dir
        self.clock = clock
        self.heartbeat_timeout = heartbeat_timeout
        self.counters = RunCounters()

    def worker_id(self, conn: Connection, name: str | None) -> int | None:
        if not name:
            return None
        found = conn.execute(select(workers.c.id).where(workers.c.name == name)).scalar()
        return -1 if found is None else int(found)  # -1 matches nothing: an empty page

    # overview ---------------------------------------------------------------------------------
    def overview(self) -> dict[str, Any]:
        now = self.clock()
        with self.db.read() as conn:
            by_type, by_author = self.counters.entry_counts(conn)
            message_counts = self.counters.message_counts(conn)
            roster = self._workers(conn, now, by_author)
            active = conn.execute(
                CLAIM_SELECT.where(claims.c.ended_at.is_(None), claims.c.lease_until > now)
            ).all()
            claim_counts = self._claim_counts(conn, now)
            prs = self._pr_counts(conn)
            points = self._checkpoints(conn)
        partners = overlapping_claims([(r.id, r.owner, r.scope.split("\n")) for r in active])
        claim_counts["overlapping"] = len(partners)
        current: dict[str, dict[str, Any]] = {}
        for row in sorted(active, key=lambda r: r.id):
            current[row.owner] = {"id": row.id, "scope": row.scope.split("\n"), "body": row.body}
        for w in roster:
            w["claim"] = current.get(w["name"])
        info = read_run_info(self.run_dir)
        deadline = info.deadline()
        totals = {
            "sessions": sum(w["sessions"] for w in roster),
            "running": sum(1 for w in roster if w["running"]),
            "tokens": sum(w["tokens"] for w in roster),
            "cost": sum(w["cost"] for w in roster),
        }
        return {
            "now": now,
            "run": {
                "name": info.name,
                "task": info.task,
                "harness": info.harness,
                "model": info.model,
                "started_at": info.started_at,
                "ended_at": info.ended_at,
                "stopped_because": info.raw.get("stopped_because"),
                "without": list(info.without),
                "budget_seconds": info.budget_seconds,
                "budget_cost": info.budget_cost,
                "time_left": None
                if deadline is None or info.ended_at is not None
                else max(0.0, deadline - now),
                "cost_left": None
                if info.budget_cost is None
                else max(0.0, info.budget_cost - totals["cost"]),
            },
            "totals": totals,
            "entries": by_type,
            "claims": claim_counts,
            "prs": prs,
            "messages": message_counts,
            "workers": roster,
            "checkpoints": points,
        }

    def _workers(
        self, conn: Connection, now: float, entry_counts: dict[int, int]
    ) -> list[dict[str, Any]]:
        usage = {
            r.worker_id: r
            for r in conn.execute(
                select(
                    sessions.c.worker_id,
                    func.count().label("n"),
                    func.sum(sessions.c.tokens_in + sessions.c.tokens_out).label("tokens"),
                    func.sum(sessions.c.cost).label("cost"),
                    func.sum(sessions.c.steps).label("steps"),
                    func.sum(case((sessions.c.ended_at.is_(None), 1), else_=0)).label("running"),
                ).group_by(sessions.c.worker_id)
            )
        }
        rows = conn.execute(select(workers).order_by(workers.c.id)).all()
        out = []
        for r in rows:
            u = usage.get(r.id)
            out.append(
                {
                    "name": r.name,
                    "model": r.model,
                    "state": liveness(r.state, r.heartbeat_at, now, self.heartbeat_timeout),
                    "heartbeat_at": r.heartbeat_at,
                    "sessions": int(u.n) if u else 0,
                    "running": bool(u and u.running),
                    "steps": int(u.steps or 0) if u else 0,
                    "tokens": int(u.tokens or 0) if u else 0,
                    "cost": float(u.cost or 0.0) if u else 0.0,
                    "entries": entry_counts.get(r.id, 0),
                }
            )
        return out

    @staticmethod
    def _claim_counts(conn: Connection, now: float) -> dict[str, int]:
        return claim_counts(conn, now)

    @staticmethod
    def _pr_counts(conn: Connection) -> dict[str, int]:
        counts = {"open": 0, "merged": 0, "closed": 0, "conflicted": 0}
        for state, n in conn.execute(
            select(pull_requests.c.state, func.count()).group_by(pull_requests.c.state)
        ):
            counts[state] = int(n)
        # An open PR is conflicted while its latest merge-related event is a refusal.
        latest = (
            select(pr_events.c.kind)
            .where(pr_events.c.number == pull_requests.c.number, pr_events.c.kind != "reviewed")
            .order_by(pr_events.c.id.desc())
            .limit(1)
            .scalar_subquery()
        )
        counts["conflicted"] = int(
            conn.execute(
                select(func.count()).where(
                    pull_requests.c.state == "open", latest.in_(("conflict", "check_failed"))
                )
            ).scalar_one()
        )
        return counts

    @staticmethod
    def _checkpoints(conn: Connection) -> list[dict[str, Any]]:
        # `status`: only "scored" points are pass rates (tampered, incomplete, error are not).
        rows = conn.execute(
            select(checkpoints, checkpoint_results.c.status)
            .outerjoin(checkpoint_results, checkpoint_results.c.checkpoint_id == checkpoints.c.id)
            .order_by(checkpoints.c.time, checkpoints.c.id)
        )
        return [
            {"time": r.time, "commit": r.commit, "passed": r.passed, "total": r.total,
             "reason": r.reason,
             "status": r.status or ("scored" if r.reason is None else "error")}
            for r in rows
        ]  # fmt: skip

    # context ----------------------------------------------------------------------------------
    def entries(
        self,
        *,
        types: list[str],
        author: str | None,
        since: float | None,
        until: float | None,
        before: int | None,
        limit: int | None,
    ) -> dict[str, Any]:
        """A page of entries, newest first; `before` (an id) pages further back."""
        size = page_size(limit)
        with self.db.read() as conn:
            query = ENTRY_SELECT
            if types:
                query = query.where(entries.c.type.in_(types))
            author_id = self.worker_id(conn, author)
            if author_id is not None:
                query = query.where(entries.c.author_id == author_id)
            if since is not None:
                query = query.where(entries.c.created_at >= since)
            if until is not None:
                query = query.where(entries.c.created_at <= until)
            if before is not None:
                query = query.where(entries.c.id < before)
            rows = conn.execute(query.order_by(entries.c.id.desc()).limit(size + 1)).all()
        page = [_entry(r) for r in rows[:size]]
        return {"entries": page, "next": page[-1]["id"] if len(rows) > size else None}

    # claims -----------------------------------------------------------------------------------
    def claims(self, *, state: str | None, owner: str | None, before: int | None,
               limit: int | None) -> dict[str, Any]:  # fmt: skip
        """The board: every active claim with whom it overlaps, then a page of the others."""
        now = self.clock()
        size = page_size(limit)
        with self.db.read() as conn:
            owner_id = self.worker_id(conn, owner)
            active = conn.execute(
                CLAIM_SELECT.where(claims.c.ended_at.is_(None), claims.c.lease_until > now)
                .order_by(claims.c.id)
            ).all()  # fmt: skip
            query = CLAIM_SELECT
            if owner_id is not None:
                query = query.where(claims.c.owner_id == owner_id)
            if state == "lapsed":
                query = query.where(claims.c.ended_at.is_(None), claims.c.lease_until <= now)
            elif state == "active":
                query = query.where(claims.c.ended_at.is_(None), claims.c.lease_until > now)
            elif state:
                query = query.where(claims.c.end_reason == state)
            if before is not None:
                query = query.where(claims.c.id < before)
            rows = conn.execute(query.order_by(claims.c.id.desc()).limit(size + 1)).all()
        partners = overlapping_claims([(r.id, r.owner, r.scope.split("\n")) for r in active])
        board = []
        for r in active:
            if owner_id is None or r.owner_id == owner_id:
                board.append({**_claim(r, now), "overlaps": partners.get(r.id, [])})
        page = [_claim(r, now) for r in rows[:size]]
        return {
            "active": board,
            "claims": page,
            "next": page[-1]["id"] if len(rows) > size else None,
        }

    # messages ---------------------------------------------------------------------------------
    def channel(self, name: str, *, before: int | None, limit: int | None) -> dict[str, Any]:
        size = page_size(limit)
        query = MESSAGE_SELECT.where(messages.c.channel == name)
        if before is not None:
            query = query.where(messages.c.id < before)
        with self.db.read() as conn:
            rows = conn.execute(query.order_by(messages.c.id.desc()).limit(size + 1)).all()
        page = [_message(r) for r in rows[:size]]
        return {"messages": page, "next": page[-1]["id"] if len(rows) > size else None}

    def threads(self, *, limit: int | None) -> dict[str, Any]:
        """DM threads (pairs of correspondents), most recently active first."""
        with self.db.read() as conn:
            top = self.counters.latest_threads(conn, page_size(limit))
            times = {
                int(i): float(t)
                for i, t in conn.execute(
                    select(messages.c.id, messages.c.created_at).where(
                        messages.c.id.in_([newest for _a, _b, _n, newest in top])
                    )
                )
            }
        return {
            "threads": [
                {"a": a, "b": b, "count": n, "last": times.get(newest)} for a, b, n, newest in top
            ]
        }

    def thread(self, a: str, b: str, *, before: int | None, limit: int | None) -> dict[str, Any]:
        """The DMs between two correspondents (a worker, "hub" or "operator"), newest first."""
        size = page_size(limit)
        with self.db.read() as conn:
            ids = {n: self.worker_id(conn, n) for n in (a, b)}
            one_way = [
                and_(messages.c.author == x, messages.c.recipient_id == ids[y])
                for x, y in ((a, b), (b, a))
                if ids[y] is not None
            ]
            query = MESSAGE_SELECT.where(messages.c.recipient_id.is_not(None), or_(*one_way))
            if before is not None:
                query = query.where(messages.c.id < before)
            rows = conn.execute(query.order_by(messages.c.id.desc()).limit(size + 1)).all()
        page = [_message(r) for r in rows[:size]]
        return {"messages": page, "next": page[-1]["id"] if len(rows) > size else None}
