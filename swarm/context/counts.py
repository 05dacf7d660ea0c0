"""Claim counters by state, cheap at any history size (index-only scans, no full table read)."""

from __future__ import annotations

from sqlalchemy import Connection, func, select

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
    for reason, count in ended:
        if reason in counts:
            counts[reason] = int(count)
    open_leases = conn.execute(
        select(claims.c.lease_until > now, func.count())
        .where(claims.c.ended_at.is_(None))
        .group_by(claims.c.lease_until > now)
    )
    for alive, count in open_leases:
        counts["active" if alive else "lapsed"] += int(count)
    return counts
