"""The shared context: an append-only, typed log of findings, with claims, cursors and grep."""

from swarm.context.model import AppendResult, Claim, Entry, EntryDelivery, EntryType, GrepResult
from swarm.context.store import ContextStore, parse_type

__all__ = [
    "AppendResult",
    "Claim",
    "ContextStore",
    "Entry",
    "EntryDelivery",
    "EntryType",
    "GrepResult",
    "parse_type",
]
