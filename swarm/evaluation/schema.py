"""The evaluator's checkpoints: the hidden-test pass rate of `main` over time."""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, String, Table, Text

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
