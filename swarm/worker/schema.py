"""Tables the worker runtime reports into: harness sessions, and the run's control flags."""

from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Index, Integer, String, Table, Text

from swarm.context.schema import Id
from swarm.db import metadata

sessions = Table(
    "sessions",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("worker_id", Id, ForeignKey("workers.id"), nullable=False),
    Column("number", Integer, nullable=False),  # 1, 2, ... per worker
    Column("harness", String(32), nullable=False),
    Column("model", String(200), nullable=True),
    Column("started_at", Float, nullable=False),
    Column("ended_at", Float, nullable=True),
    # submitted | step_limit | cost_limit | time_limit | context_limit | error | stopped
    Column("ended", String(32), nullable=True),
    Column("steps", Integer, nullable=False, default=0),
    Column("tokens_in", Integer, nullable=False, default=0),
    Column("tokens_out", Integer, nullable=False, default=0),
    Column("cost", Float, nullable=False, default=0.0),
    Column("detail", Text, nullable=False, default=""),
    Index("sessions_by_worker", "worker_id", "number"),
)

# Key/value flags a person sets for the whole run (e.g. stop = "1"); workers read them.
run_flags = Table(
    "run_flags",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
    Column("set_at", Float, nullable=False),
)
