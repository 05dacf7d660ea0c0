"""The shared context's vocabulary: entry types, entries, claims, and what a call delivers."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime


class EntryType(enum.StrEnum):
    OBSERVED = "OBSERVED"  # something seen: a test output, a behaviour, a file's shape
    FACT = "FACT"  # something established and verified, that others can rely on
    FAIL = "FAIL"  # an attempt that did not work, and why (so nobody repeats it)
    CLAIM = "CLAIM"  # "I am working on this scope" (has a lease)
    PATCH_SUMMARY = "PATCH_SUMMARY"  # what changed, why, and the verification evidence


@dataclass(frozen=True)
class Entry:
    id: int
    created_at: float
    author: str
    type: EntryType
    body: str
    scope: tuple[str, ...] = ()
    refs: tuple[int, ...] = ()

    @property
    def time(self) -> str:
        return datetime.fromtimestamp(self.created_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Claim:
    id: int
    owner: str
    owner_id: int
    scope: tuple[str, ...]
    created_at: float
    lease_until: float
    ended_at: float | None = None
    end_reason: str | None = None
    ended_by: int | None = None
    body: str = ""

    def state(self, now: float) -> str:
        if self.end_reason:
            return self.end_reason
        return "active" if self.lease_until > now else "lapsed"


@dataclass(frozen=True)
class PendingEntry:
    """An entry that passed every check that needs no database, waiting to be written."""

    author_id: int
    author_name: str | None
    type: EntryType
    body: str
    scope: tuple[str, ...]
    refs: tuple[int, ...]
    lease: float  # for a CLAIM: seconds


@dataclass(frozen=True)
class AppendResult:
    entry: Entry
    overlaps: tuple[Claim, ...] = ()  # active claims of others that overlap a new CLAIM
    ended: tuple[Claim, ...] = ()  # claims this entry completed or failed


@dataclass(frozen=True)
class EntryDelivery:
    """Peers' entries that are new to a worker: the newest `shown`, and how many more there were."""

    shown: tuple[Entry, ...] = ()
    more: int = 0
    first_id: int = 0  # the range that was new, for `sw grep --after/--before`
    last_id: int = 0


@dataclass(frozen=True)
class GrepResult:
    entries: tuple[Entry, ...]
    truncated: bool  # more matches exist beyond the limit
    used_index: bool  # whether a trigram index narrowed the search
    scanned: int = 0  # rows checked by the regex engine
    notes: tuple[str, ...] = field(default_factory=tuple)
