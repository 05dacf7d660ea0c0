"""The evaluator's checkpoints: the hidden-test pass rate of `main` over time."""

from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Index, Integer, String, Table, Text

from swarm.context.schema import Id
from swarm.db import metadata

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("time", Float, nullable=False),
    Column("commit", String(64), nullable=False),
    Column("passed", Integer, nullable=False),
    Column("total", Integer, nullable=False),
    Column("duration", Float, nullable=False, default=0.0),
    Column("reason", Text, nullable=True),  # why a checkpoint scored nothing (timeout, crash)
    Index("checkpoints_by_time", "time"),
)

# What a checkpoint found beyond its counts: its status and each hidden test's outcome (a JSON
# object of test id -> outcome). A table of its own, so the hub still opens the database of a
# run recorded before it existed (the schema is created, never migrated).
checkpoint_results = Table(
    "checkpoint_results",
    metadata,
    Column("checkpoint_id", Id, ForeignKey("checkpoints.id"), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("tests", Text, nullable=False),
)
