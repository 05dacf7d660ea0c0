"""Tables of the embedded workspace adapter (pull requests, reviews, merge events)."""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Index,
    String,
    Table,
    Text,
    text,
)

from swarm.context.schema import Id
from swarm.db import metadata

pull_requests = Table(
    "pull_requests",
    metadata,
    Column("number", Id, primary_key=True, autoincrement=True),
    Column("title", String(200), nullable=False),
    Column("body", Text, nullable=False, server_default=text("''")),
    Column("author_id", Id, ForeignKey("workers.id"), nullable=False),
    Column("author", String(64), nullable=False),
    Column("branch", String(255), nullable=False),
    Column("state", String(16), nullable=False, server_default=text("'open'")),
    Column("created_at", Float, nullable=False),
    Column("head", String(64), nullable=False),  # at open; replaced by the merged head
    Column("merged_at", Float, nullable=True),
    Column("merged_by", String(64), nullable=True),
    Column("merge_commit", String(64), nullable=True),
    Column("closed_at", Float, nullable=True),
    Column("closed_by", String(64), nullable=True),
    CheckConstraint("state IN ('open', 'merged', 'closed')", name="pr_state_known"),
    Index("pull_requests_by_state", "state", "number"),
    Index("pull_requests_by_author", "author", "number"),
    # One open PR per branch: two `sw pr open` racing on the same branch cannot both win.
    Index(
        "pull_requests_one_open_per_branch",
        "branch",
        unique=True,
        sqlite_where=text("state = 'open'"),
        postgresql_where=text("state = 'open'"),
    ),
)

reviews = Table(
    "reviews",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("number", Id, ForeignKey("pull_requests.number"), nullable=False),
    Column("author_id", Id, ForeignKey("workers.id"), nullable=False),
    Column("author", String(64), nullable=False),
    Column("verdict", String(16), nullable=False),
    Column("body", Text, nullable=False, server_default=text("''")),
    Column("head", String(64), nullable=False),  # the commit that was reviewed
    Column("created_at", Float, nullable=False),
    CheckConstraint(
        "verdict IN ('approve', 'request_changes', 'comment')", name="review_verdict_known"
    ),
    Index("reviews_by_pr", "number", "id"),
)

pr_events = Table(
    "pr_events",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("number", Id, ForeignKey("pull_requests.number"), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("actor", String(64), nullable=False),
    Column("kind", String(32), nullable=False),  # opened, merged, conflict, check_failed, closed…
    Column("detail", Text, nullable=False, server_default=text("''")),
    Index("pr_events_by_pr", "number", "id"),
)
