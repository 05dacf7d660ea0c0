"""Tables of the embedded messages adapter."""

from __future__ import annotations

from sqlalchemy import Column, FetchedValue, Float, ForeignKey, Index, String, Table, Text

from swarm.context.schema import Id
from swarm.db import metadata

messages = Table(
    "messages",
    metadata,
    # Commit-ordered like entries (see swarm.db): cursors read "every DM after id N".
    Column("id", Id, primary_key=True, autoincrement=False, server_default=FetchedValue()),
    Column("created_at", Float, nullable=False),
    Column("author_id", Id, ForeignKey("workers.id"), nullable=True),
    Column("author", String(64), nullable=False),  # name, kept for "hub" and "operator"
    Column("channel", String(64), nullable=True),
    Column("recipient_id", Id, ForeignKey("workers.id"), nullable=True),
    Column("body", Text, nullable=False),
    Index("messages_by_channel", "channel", "id"),
    Index("messages_by_recipient", "recipient_id", "id"),
    Index("messages_by_author", "author_id", "id"),
)
