"""Claim counters by state, cheap at any history size (index-only scans, no full table read)."""

from __future__ import annotations

from sqlalchemy import Connection, case, func, select

from swarm.context.schema import claims

STATES = ("active", "completed", "failed", "released", "lapsed")


def claim_counts(conn: Connection, now: float) -> dict[str, int]:
    """{active, completed, failed, released, lapsed}: ended claims grouped by their reason (on the
    `claims_by_end` index), open ones split by lease (on the small set of open claims)."""
    counts = dict.fromkeys(STATES, 0)
    ended = conn.execute(
        select(claims.c.end_reason, func.count())
        .where(claims.c.end_reason.is_not(None))
        .group_by(claims.c.end_reason)
    )
    lapsed_ended = 0  # ended by the hub: "lapsed (worker dead)"
    for reason, count in ended:
        if reason in counts:
            counts[reason] = int(count)
        elif reason.startswith("lapsed"):
            lapsed_ended += int(count)
    total, alive = conn.execute(
        select(func.count(), func.sum(case((claims.c.lease_until > now, 1), else_=0))).where(
            claims.c.ended_at.is_(None)
        )
    ).one()
    counts["active"] = int(alive or 0)
    counts["lapsed"] = int(total or 0) - counts["active"] + lapsed_ended
    return counts
