"""Tables of the shared context: workers (identity and cursors), entries, claims."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    FetchedValue,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    text,
)

from swarm.db import metadata

Id = BigInteger().with_variant(Integer, "sqlite")

workers = Table(
    "workers",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False, unique=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    Column("model", String(200), nullable=True),
    # Cursors: the last id of each stream this worker has been shown (compare-and-swap updated).
    Column("entry_cursor", BigInteger, nullable=False, server_default=text("0")),
    Column("dm_cursor", BigInteger, nullable=False, server_default=text("0")),
    Column("channel_cursor", BigInteger, nullable=False, server_default=text("0")),
    # Status reported by the worker runtime.
    Column("state", String(32), nullable=False, server_default=text("'registered'")),
    Column("status", Text, nullable=False, server_default=text("'{}'")),
    Column("heartbeat_at", Float, nullable=True),
)

# The workers the run's join token registered (it registers at most the declared number; the
# operator's registrations do not count against it). A table of its own, so the hub still opens
# the database of a run recorded before it existed (the schema is created, never migrated).
joined_workers = Table(
    "joined_workers",
    metadata,
    Column("worker_id", Id, ForeignKey("workers.id"), primary_key=True),
)

ENTRY_TYPES = ("OBSERVED", "FACT", "FAIL", "CLAIM", "PATCH_SUMMARY")

entries = Table(
    "entries",
    metadata,
    # No default: SQLite hands out rowids under its single writer lock; PostgreSQL draws the id
    # in a trigger under an advisory lock (see swarm.db), so ids are in commit order on both.
    Column("id", Id, primary_key=True, autoincrement=False, server_default=FetchedValue()),
    Column("created_at", Float, nullable=False),
    Column("author_id", Id, ForeignKey("workers.id"), nullable=False),
    Column("type", String(16), nullable=False),
    Column("body", Text, nullable=False),
    Column("scope", Text, nullable=False, server_default=text("''")),  # items joined by "\n"
    Column("refs", Text, nullable=False, server_default=text("''")),  # ids joined by ","
    CheckConstraint(
        "type IN ({})".format(", ".join(f"'{t}'" for t in ENTRY_TYPES)), name="entry_type_known"
    ),
    Index("entries_by_type", "type", "id"),
    Index("entries_by_author", "author_id", "id"),
    Index("entries_by_time", "created_at"),
)

claims = Table(
    "claims",
    metadata,
    Column("id", Id, ForeignKey("entries.id"), primary_key=True, autoincrement=False),
    Column("owner_id", Id, ForeignKey("workers.id"), nullable=False),
    Column("scope", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("lease_until", Float, nullable=False),
    Column("ended_at", Float, nullable=True),
    Column("end_reason", String(32), nullable=True),  # released | completed | failed
    Column("ended_by", Id, nullable=True),  # the entry that ended it, if any
    Index("claims_open", "ended_at", "lease_until"),
    Index("claims_by_owner", "owner_id", "ended_at"),
    Index("claims_by_end", "end_reason"),
)

entry_refs = Table(
    "entry_refs",
    metadata,
    Column("entry_id", Id, ForeignKey("entries.id"), primary_key=True),
    Column("ref_id", Id, ForeignKey("entries.id"), primary_key=True),
    Index("entry_refs_by_target", "ref_id"),
)
