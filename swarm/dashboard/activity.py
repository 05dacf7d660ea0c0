"""Pull requests and one worker's timeline, as the dashboard shows them."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import func, or_, select

from swarm.context.schema import entries, workers
from swarm.context.store import ENTRY_SELECT
from swarm.dashboard.code import Code
from swarm.dashboard.queries import (
    DashboardQueries,
    liveness,
    page_size,
)
from swarm.errors import NotFound, Unavailable
from swarm.messages.local import MESSAGE_SELECT
from swarm.messages.schema import messages
from swarm.worker.schema import sessions
from swarm.workspace.ports import Workspace
from swarm.workspace.schema import pr_events, pull_requests, reviews

TIMELINE_EACH = 100  # newest items of each kind joined into one timeline page


def _pr_row(row: Any) -> dict[str, Any]:
    return {
        "number": row.number,
        "title": row.title,
        "author": row.author,
        "branch": row.branch,
        "state": row.state,
        "created_at": row.created_at,
        "merged_at": row.merged_at,
        "merged_by": row.merged_by,
        "closed_at": row.closed_at,
    }


class Activity:
    """PR pages and worker timelines over the same database as `DashboardQueries`."""

    def __init__(
        self, queries: DashboardQueries, workspace: Workspace | None, code: Code | None = None
    ) -> None:
        self.q = queries
        self.db = queries.db
        self.workspace = workspace
        self.code = code

    def prs(self, *, state: str | None, author: str | None, before: int | None,
            limit: int | None) -> dict[str, Any]:  # fmt: skip
        """A page of PRs, newest first, with their review counts and latest merge event."""
        size = page_size(limit)
        query = select(pull_requests)
        if state:
            query = query.where(pull_requests.c.state == state)
        if author:
            query = query.where(pull_requests.c.author == author)
        if before is not None:
            query = query.where(pull_requests.c.number < before)
        with self.db.read() as conn:
            rows = conn.execute(query.order_by(pull_requests.c.number.desc()).limit(size + 1)).all()
            numbers = [r.number for r in rows[:size]]
            review_counts: dict[int, int] = dict(
                conn.execute(
                    select(reviews.c.number, func.count())
                    .where(reviews.c.number.in_(numbers))
                    .group_by(reviews.c.number)
                ).all()
            )
            conflicts: dict[int, int] = dict(
                conn.execute(
                    select(pr_events.c.number, func.count())
                    .where(pr_events.c.number.in_(numbers), pr_events.c.kind == "conflict")
                    .group_by(pr_events.c.number)
                ).all()
            )
        sizes = self.code.pr_sizes(rows[:size]) if self.code is not None else {}
        page = [
            {**_pr_row(r), "reviews": int(review_counts.get(r.number, 0)),
             "conflicts": int(conflicts.get(r.number, 0)), "size": sizes.get(r.number)}
            for r in rows[:size]
        ]  # fmt: skip
        return {"prs": page, "next": page[-1]["number"] if len(rows) > size else None}

    def pr(self, number: int) -> dict[str, Any]:
        """One PR: description, diff, reviews, and its merge / conflict history."""
        if self.workspace is None:
            raise Unavailable("this hub runs without a workspace")
        detail = self.workspace.get_pr(number)
        with self.db.read() as conn:
            events = conn.execute(
                select(pr_events).where(pr_events.c.number == number).order_by(pr_events.c.id)
            ).all()
        return {
            "pr": dataclasses.asdict(detail.pr),
            "diff": detail.diff,
            "files": list(detail.files),
            "reviews": [dataclasses.asdict(r) for r in detail.reviews],
            "mergeable": detail.mergeable,
            "conflicts": list(detail.conflicts),
            "events": [
                {"time": e.created_at, "actor": e.actor, "kind": e.kind, "detail": e.detail}
                for e in events
            ],
        }

    def timeline(self, name: str, *, before: float | None) -> dict[str, Any]:
        """One worker's sessions, entries, messages and PR activity, newest first."""
        now = self.q.clock()
        with self.db.read() as conn:
            worker = conn.execute(select(workers).where(workers.c.name == name)).first()
            if worker is None:
                raise NotFound(f"no worker named {name!r}")
            items: list[dict[str, Any]] = []

            for s in conn.execute(
                select(sessions).where(sessions.c.worker_id == worker.id)
                .order_by(sessions.c.number.desc()).limit(TIMELINE_EACH)
            ):  # fmt: skip
                items.append({"kind": "session", "time": s.started_at, "number": s.number,
                              "ended_at": s.ended_at, "ended": s.ended, "steps": s.steps,
                              "tokens": s.tokens_in + s.tokens_out, "cost": s.cost,
                              "harness": s.harness, "model": s.model})  # fmt: skip
            entry_query = ENTRY_SELECT.where(entries.c.author_id == worker.id)
            message_query = MESSAGE_SELECT.where(
                or_(messages.c.author_id == worker.id, messages.c.recipient_id == worker.id)
            )
            event_query = (
                select(pr_events, pull_requests.c.title)
                .join(pull_requests, pull_requests.c.number == pr_events.c.number)
                .where(or_(pr_events.c.actor == name, pull_requests.c.author == name))
            )
            if before is not None:
                entry_query = entry_query.where(entries.c.created_at < before)
                message_query = message_query.where(messages.c.created_at < before)
                event_query = event_query.where(pr_events.c.created_at < before)
            for r in conn.execute(entry_query.order_by(entries.c.id.desc()).limit(TIMELINE_EACH)):
                items.append({"kind": "entry", "time": r.created_at, "id": r.id,
                              "type": r.type, "body": r.body,
                              "scope": r.scope.split("\n") if r.scope else []})  # fmt: skip
            for r in conn.execute(
                message_query.order_by(messages.c.id.desc()).limit(TIMELINE_EACH)
            ):
                items.append({"kind": "message", "time": r.created_at, "id": r.id,
                              "author": r.author, "to": r.recipient, "channel": r.channel,
                              "body": r.body})  # fmt: skip
            for r in conn.execute(event_query.order_by(pr_events.c.id.desc()).limit(TIMELINE_EACH)):
                items.append({"kind": "pr", "time": r.created_at, "number": r.number,
                              "title": r.title, "actor": r.actor, "event": r.kind,
                              "detail": r.detail})  # fmt: skip
        if before is not None:
            items = [i for i in items if i["time"] < before]
        items.sort(key=lambda i: i["time"], reverse=True)
        page = items[:TIMELINE_EACH]
        return {
            "worker": {
                "name": worker.name,
                "model": worker.model,
                "state": liveness(worker.state, worker.heartbeat_at, now, self.q.heartbeat_timeout),
                "heartbeat_at": worker.heartbeat_at,
                "now": now,
            },
            "items": page,
            "next": page[-1]["time"] if len(items) > len(page) else None,
        }
