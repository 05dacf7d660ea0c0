"""The shared context: an append-only log of typed entries, claims with leases, cursors, grep."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    Select,
    func,
    insert,
    or_,
    select,
    text,
    update,
)

from swarm.context import scope as scopes
from swarm.context.grep import Pattern, compile_pattern
from swarm.context.model import (
    AppendResult,
    Claim,
    Entry,
    EntryType,
    GrepResult,
    PendingEntry,
)
from swarm.context.schema import claims, entries, entry_refs, workers
from swarm.db import Database
from swarm.errors import NUL_REFUSED, Conflict, Forbidden, InvalidInput, NotFound, SwarmError

# Many entries in one statement with one parameter, whatever their number: the rows as one JSON
# array, inserted in array order (see ContextStore._insert_entries).
INSERT_ENTRIES_SQLITE = text(
    "INSERT INTO entries (created_at, author_id, type, body, scope, refs) "
    "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
    "json_extract(value, '$[2]'), json_extract(value, '$[3]'), json_extract(value, '$[4]'), "
    "json_extract(value, '$[5]') FROM json_each(:rows) ORDER BY key"
)
LAST_ROWID = text("SELECT last_insert_rowid(), changes()")
INSERT_ENTRIES_PG = text(
    "INSERT INTO entries (created_at, author_id, type, body, scope, refs) "
    "SELECT (r->>0)::float8, (r->>1)::bigint, r->>2, r->>3, r->>4, r->>5 "
    "FROM json_array_elements(CAST(:rows AS json)) WITH ORDINALITY AS t(r, i) ORDER BY i "
    "RETURNING id"
)
MAX_REFS = 32
MAX_GREP_LIMIT = 500
SCAN_BATCH = 2000
PROBE_WINDOW = 1024  # PostgreSQL: newest ids checked by key before the trigram index
PROBE_MAX = 65536  # ... and how far that walk may go when the literal is seen in the window
FIRST_BATCH = 64  # the first batch is small: a grep usually wants only `limit` rows
ENDING_TYPES = (EntryType.PATCH_SUMMARY, EntryType.FAIL)

# Entries with their author's name; statements are immutable, so every query starts from it.
ENTRY_SELECT: Select[Any] = select(
    entries.c.id,
    entries.c.created_at,
    workers.c.name.label("author"),
    entries.c.type,
    entries.c.body,
    entries.c.scope,
    entries.c.refs,
).join(workers, workers.c.id == entries.c.author_id)


def _split(value: str) -> tuple[str, ...]:
    return tuple(value.split("\n")) if value else ()


def entry_from_row(row: Row[Any]) -> Entry:
    """An Entry from a row of ENTRY_SELECT (or any row with the same columns)."""
    return entry_from_values(
        row.id, row.created_at, row.author, row.type, row.body, row.scope, row.refs
    )


def entry_from_values(
    id: int, created_at: float, author: str, type: str, body: str, scope: str, refs: str
) -> Entry:
    """An Entry from its stored columns (scope and refs as stored: joined by newline, comma)."""
    ref_ids = tuple(int(r) for r in refs.split(",")) if refs else ()
    return Entry(id, created_at, author, EntryType(type), body, _split(scope), ref_ids)


def parse_type(value: str) -> EntryType:
    try:
        return EntryType(value.strip().upper())
    except ValueError:
        raise InvalidInput(
            f"unknown entry type {value!r}; use one of {', '.join(t.value for t in EntryType)}"
        ) from None


class ContextStore:
    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], float] = time.time,
        lease_seconds: float = 300.0,
        body_limit: int = 8000,
    ) -> None:
        self.db = db
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.body_limit = body_limit

    # ------------------------------------------------------------------ writing

    def append(
        self,
        author_id: int,
        type: EntryType | str,
        body: str,
        *,
        scope: object = None,
        refs: object = None,
        lease_seconds: float | None = None,
    ) -> AppendResult:
        """Record one entry. A CLAIM also opens a claim; a PATCH_SUMMARY or FAIL that refers to
        the author's own claim ends it. Everything is checked before anything is written. (The
        hub batches concurrent appends: swarm.hub.group_commit.)"""
        pending = self.prepare(author_id, type, body, scope, refs, lease_seconds)
        with self.db.write() as conn:
            problem = self.missing_refs(conn, [pending])[0]
            if problem is not None:
                raise problem
            return self.write_many(conn, [pending])[0]

    def prepare(
        self,
        author_id: int,
        type: EntryType | str,
        body: object,
        scope: object = None,
        refs: object = None,
        lease_seconds: float | None = None,
        author_name: str | None = None,
    ) -> PendingEntry:
        """Check an entry that is about to be written (InvalidInput says what is wrong)."""
        kind = type if isinstance(type, EntryType) else parse_type(type)
        text_ = self._check_body(body)
        items = scopes.normalize(scope)
        ref_ids = self._check_refs(refs)
        if kind is EntryType.CLAIM and not items:
            raise InvalidInput(
                "a CLAIM needs a scope: the paths, globs or topic:<name> you will work on"
            )
        lease = self._check_lease(lease_seconds)
        return PendingEntry(author_id, author_name, kind, text_, items, ref_ids, lease)

    def missing_refs(
        self, conn: Connection, pending: Sequence[PendingEntry]
    ) -> list[SwarmError | None]:
        """For each pending entry, the error that refuses it: refs to entries that do not exist
        (one query for all of them; entries are never deleted, so the answer holds until
        commit), or a PATCH_SUMMARY that would complete its author's lapsed claim (fencing)."""
        wanted = {r for p in pending for r in p.refs}
        found: set[int] = set()
        if wanted:
            query = select(entries.c.id).where(entries.c.id.in_(wanted))
            found = set(conn.execute(query).scalars())
        fenced = self._fenced(conn, pending)
        problems: list[SwarmError | None] = []
        for p in pending:
            missing = sorted(set(p.refs) - found)
            problem: SwarmError | None = None
            if missing:
                problem = NotFound(
                    "refs name entries that do not exist: "
                    + ", ".join("#" + str(m) for m in missing)
                )
            elif p.type is EntryType.PATCH_SUMMARY:
                late = [fenced[(p.author_id, r)] for r in p.refs if (p.author_id, r) in fenced]
                if late:
                    problem = Conflict(
                        f"{late[0]} before this PATCH_SUMMARY, so the work may have been taken "
                        "over; nothing was recorded. Re-read the context (sw claims; sw grep "
                        "the unit) and make a new CLAIM before finishing this work."
                    )
            problems.append(problem)
        return problems

    def _fenced(
        self, conn: Connection, pending: Sequence[PendingEntry]
    ) -> dict[tuple[int, int], str]:
        """(owner, claim) -> why, for the claims PATCH_SUMMARYs refer to that lapsed."""
        wanted = {r for p in pending if p.type is EntryType.PATCH_SUMMARY for r in p.refs}
        if not wanted:
            return {}
        now = self.clock()
        rows = conn.execute(
            select(claims.c.id, claims.c.owner_id, claims.c.lease_until, claims.c.end_reason)
            .where(claims.c.id.in_(wanted))
        ).all()  # fmt: skip
        late = {}
        for row in rows:
            why = _lapse(row.id, row.lease_until, row.end_reason, now)
            if why:
                late[(row.owner_id, row.id)] = why
        return late

    def check_fence(self, worker_id: int, claim_id: int) -> Claim:
        """The claim a worker acts under (e.g. merging its PR), if it is still its own and
        alive; otherwise Conflict says why and what to do."""
        now = self.clock()
        with self.db.read() as conn:
            row = conn.execute(self._claim_select().where(claims.c.id == claim_id)).first()
        if row is None:
            raise NotFound(f"#{claim_id} is not a claim; `sw claims --mine` lists yours")
        if row.owner_id != worker_id:
            raise Forbidden(f"claim #{claim_id} belongs to {row.owner}, not to you")
        why = _lapse(row.id, row.lease_until, row.end_reason, now)
        if why or row.ended_at is not None:
            reason = why or f"claim #{claim_id} already ended ({row.end_reason})"
            raise Conflict(
                f"{reason}; the work may have been taken over, so this was refused. Re-read the "
                "context (sw claims; sw grep the unit) and make a new CLAIM before going on."
            )
        return _claim(row)

    def write_many(self, conn: Connection, pending: Sequence[PendingEntry]) -> list[AppendResult]:
        """Write checked entries (see `missing_refs`) in order, in the caller's write transaction:
        one INSERT for all of them, then claims opened and ended in the same order, so of two
        claims racing for one scope the later one always sees the earlier."""
        if not pending:
            return []
        now = self.clock()
        ids = self._insert_entries(
            conn,
            [
                (
                    now,
                    p.author_id,
                    p.type.value,
                    p.body,
                    "\n".join(p.scope),
                    ",".join(map(str, p.refs)),
                )
                for p in pending
            ],
        )
        ref_rows = [
            {"entry_id": entry_id, "ref_id": r}
            for entry_id, p in zip(ids, pending, strict=True)
            for r in p.refs
        ]
        if ref_rows:
            conn.execute(insert(entry_refs), ref_rows)
        names = {p.author_id: p.author_name for p in pending if p.author_name}
        unnamed = {p.author_id for p in pending} - names.keys()
        if unnamed:
            query = select(workers.c.id, workers.c.name).where(workers.c.id.in_(unnamed))
            names.update((row.id, row.name) for row in conn.execute(query))
        active: list[Claim] | None = None  # read once, after our INSERT took the id lock
        results = []
        for entry_id, p in zip(ids, pending, strict=True):
            overlaps: tuple[Claim, ...] = ()
            ended: tuple[Claim, ...] = ()
            if p.type is EntryType.CLAIM:
                if active is None:
                    active = self._active_claims(conn, now)
                overlaps = tuple(
                    c
                    for c in active
                    if c.owner_id != p.author_id and scopes.overlaps(p.scope, c.scope)
                )
                conn.execute(
                    insert(claims).values(
                        id=entry_id,
                        owner_id=p.author_id,
                        scope="\n".join(p.scope),
                        created_at=now,
                        lease_until=now + p.lease,
                    )
                )
                active.append(
                    Claim(
                        entry_id,
                        names[p.author_id],
                        p.author_id,
                        p.scope,
                        now,
                        now + p.lease,
                        body=p.body,
                    )
                )
            elif p.type in ENDING_TYPES and p.refs:
                reason = "completed" if p.type is EntryType.PATCH_SUMMARY else "failed"
                ended = self._end_claims(conn, p.author_id, p.refs, reason, entry_id, now)
                if active is not None and ended:
                    gone = {c.id for c in ended}
                    active = [c for c in active if c.id not in gone]
            entry = Entry(entry_id, now, names[p.author_id], p.type, p.body, p.scope, p.refs)
            results.append(AppendResult(entry, overlaps, ended))
        return results

    def _insert_entries(self, conn: Connection, rows: list[tuple[Any, ...]]) -> list[int]:
        """Insert rows of (created_at, author_id, type, body, scope, refs), in order, in one
        statement; their ids, ascending.

        SQLite: the rows as one JSON array, inserted in one step, with no row to read back (each
        row read releases and retakes the GIL, which in a busy hub waits on the event loop; see
        swarm.delivery). Entries are never deleted and SQLite gives a new row the highest rowid
        plus one, so under the single writer the ids are the n that end at last_insert_rowid().
        PostgreSQL: the id trigger runs row by row under its lock in array order, and RETURNING
        may answer in any order. (A multi-row VALUES statement is parsed anew by psycopg for
        each length, a tenth of the hub's CPU; columns as arrays through unnest cost psycopg a
        regular expression or two per element to quote them: both measured.)
        """
        as_json = json.dumps(rows)
        if self.db.is_sqlite:
            conn.execute(INSERT_ENTRIES_SQLITE, {"rows": as_json})
            last, inserted = conn.execute(LAST_ROWID).one()
            ids = list(range(last - inserted + 1, last + 1))
        else:
            ids = sorted(conn.execute(INSERT_ENTRIES_PG, {"rows": as_json}).scalars())
        if len(ids) != len(rows):
            raise RuntimeError(f"inserted {len(rows)} entries but got {len(ids)} ids back")
        return ids

    def _check_body(self, body: object) -> str:
        if not isinstance(body, str) or not body.strip():
            raise InvalidInput("the body is empty; say what you observed, established or did")
        if len(body) > self.body_limit:
            raise InvalidInput(
                f"the body is {len(body)} characters; the limit is {self.body_limit}. "
                "Summarize, and point at files or commits for the details"
            )
        if "\x00" in body:
            raise InvalidInput(NUL_REFUSED.format(what="the body"))
        return body.strip()

    @staticmethod
    def _check_refs(refs: object) -> tuple[int, ...]:
        if refs is None:
            return ()
        if isinstance(refs, str | bytes) or not isinstance(refs, Sequence):
            raise InvalidInput("refs must be a list of entry ids, e.g. [12, 40]")
        ids: list[int] = []
        for ref in refs:
            if isinstance(ref, bool) or not isinstance(ref, int) or not 0 < ref < 2**63:
                raise InvalidInput(f"refs must be positive entry ids; got {ref!r}")
            if ref not in ids:
                ids.append(ref)
        if len(ids) > MAX_REFS:
            raise InvalidInput(f"{len(ids)} refs; the limit is {MAX_REFS}")
        return tuple(ids)

    def _check_lease(self, seconds: float | None) -> float:
        if seconds is None:
            return self.lease_seconds
        if not 1 <= seconds <= 86400:
            raise InvalidInput(f"a lease is 1 to 86400 seconds; got {seconds}")
        return float(seconds)

    def _end_claims(
        self,
        conn: Connection,
        author_id: int,
        ids: Sequence[int],
        reason: str,
        by: int,
        now: float,
    ) -> tuple[Claim, ...]:
        rows = conn.execute(
            self._claim_select().where(
                claims.c.id.in_(ids), claims.c.owner_id == author_id, claims.c.ended_at.is_(None)
            )
        ).all()
        if rows:
            conn.execute(
                update(claims)
                .where(claims.c.id.in_([r.id for r in rows]), claims.c.ended_at.is_(None))
                .values(ended_at=now, end_reason=reason, ended_by=by)
            )
        return tuple(_claim(r, ended_at=now, end_reason=reason, ended_by=by) for r in rows)

    # ------------------------------------------------------------------ claims

    @staticmethod
    def _claim_select() -> Select[Any]:
        return (
            select(
                claims,
                workers.c.name.label("owner"),
                entries.c.body.label("body"),
            )
            .join(workers, workers.c.id == claims.c.owner_id)
            .join(entries, entries.c.id == claims.c.id)
        )

    def _active_claims(self, conn: Connection, now: float) -> list[Claim]:
        rows = conn.execute(
            self._claim_select()
            .where(claims.c.ended_at.is_(None), claims.c.lease_until > now)
            .order_by(claims.c.id)
        ).all()
        return [_claim(r) for r in rows]

    def claims(
        self, *, include_ended: bool = False, owner_id: int | None = None, limit: int = 500
    ) -> list[Claim]:
        """Active claims (oldest first); with `include_ended`, the newest claims of any state."""
        now = self.clock()
        query = self._claim_select()
        if owner_id is not None:
            query = query.where(claims.c.owner_id == owner_id)
        if include_ended:
            query = query.order_by(claims.c.id.desc()).limit(limit)
        else:
            query = query.where(claims.c.ended_at.is_(None), claims.c.lease_until > now)
            query = query.order_by(claims.c.id).limit(limit)
        with self.db.read() as conn:
            return [_claim(r) for r in conn.execute(query).all()]

    def claim(self, claim_id: int) -> Claim:
        with self.db.read() as conn:
            row = conn.execute(self._claim_select().where(claims.c.id == claim_id)).first()
        if row is None:
            raise NotFound(f"#{claim_id} is not a claim; `sw claims` lists the active ones")
        return _claim(row)

    def overlapping(self, claim: Claim) -> list[Claim]:
        now = self.clock()
        with self.db.read() as conn:
            return [
                c
                for c in self._active_claims(conn, now)
                if c.owner_id != claim.owner_id and scopes.overlaps(claim.scope, c.scope)
            ]

    def _owned_open_claim(self, conn: Connection, worker_id: int, claim_id: int) -> Row[Any]:
        row = conn.execute(self._claim_select().where(claims.c.id == claim_id)).first()
        if row is None:
            raise NotFound(f"#{claim_id} is not a claim; `sw claims --mine` lists yours")
        if row.owner_id != worker_id:
            raise Forbidden(
                f"claim #{claim_id} belongs to {row.owner}; only its owner can renew or release it"
                f" (DM {row.owner} to negotiate)"
            )
        if row.ended_at is not None:
            raise Conflict(
                f"claim #{claim_id} already ended ({row.end_reason}"
                + (f" by #{row.ended_by}" if row.ended_by else "")
                + "); make a new CLAIM to take the work up again"
            )
        return row

    def renew(self, worker_id: int, claim_id: int, seconds: float | None = None) -> Claim:
        """Extend a claim's lease from now; a lapsed claim stays lapsed (fencing)."""
        lease = self._check_lease(seconds)
        now = self.clock()
        with self.db.write() as conn:
            row = self._owned_open_claim(conn, worker_id, claim_id)
            lapsed = _lapse(row.id, row.lease_until, row.end_reason, now)
            if lapsed:
                raise Conflict(
                    f"{lapsed}: it cannot be renewed, as a peer may have taken the work over. "
                    "Re-read the context (sw claims; sw grep) and make a new CLAIM."
                )
            conn.execute(
                update(claims).where(claims.c.id == claim_id).values(lease_until=now + lease)
            )
        return _claim(row, lease_until=now + lease)

    def release(self, worker_id: int, claim_id: int) -> Claim:
        now = self.clock()
        with self.db.write() as conn:
            row = self._owned_open_claim(conn, worker_id, claim_id)
            conn.execute(
                update(claims)
                .where(claims.c.id == claim_id)
                .values(ended_at=now, end_reason="released")
            )
        return _claim(row, ended_at=now, end_reason="released")

    def release_all(self, worker_id: int) -> list[Claim]:
        """End every open claim of a worker (its runtime is stopping)."""
        now = self.clock()
        with self.db.write() as conn:
            rows = conn.execute(
                self._claim_select().where(
                    claims.c.owner_id == worker_id, claims.c.ended_at.is_(None)
                )
            ).all()
            conn.execute(
                update(claims)
                .where(claims.c.owner_id == worker_id, claims.c.ended_at.is_(None))
                .values(ended_at=now, end_reason="released")
            )
        return [_claim(r, ended_at=now, end_reason="released") for r in rows]

    # ------------------------------------------------------------------ reading

    def get(self, entry_id: int) -> Entry:
        with self.db.read() as conn:
            row = conn.execute(ENTRY_SELECT.where(entries.c.id == entry_id)).first()
        if row is None:
            raise NotFound(f"no entry #{entry_id}; `sw tail` shows the newest ids")
        return entry_from_row(row)

    def referrers(self, entry_id: int) -> list[Entry]:
        """Entries that refer to `entry_id` (e.g. the PATCH_SUMMARY that completed a CLAIM)."""
        with self.db.read() as conn:
            rows = conn.execute(
                ENTRY_SELECT.join(entry_refs, entry_refs.c.entry_id == entries.c.id)
                .where(entry_refs.c.ref_id == entry_id)
                .order_by(entries.c.id)
            ).all()
        return [entry_from_row(r) for r in rows]

    def head(self) -> int:
        with self.db.read() as conn:
            return int(conn.execute(select(func.coalesce(func.max(entries.c.id), 0))).scalar_one())

    def tail(
        self,
        limit: int = 20,
        *,
        types: Sequence[EntryType] = (),
        author_id: int | None = None,
    ) -> list[Entry]:
        """The newest entries, newest first."""
        query = ENTRY_SELECT.order_by(entries.c.id.desc()).limit(max(1, min(limit, 500)))
        if types:
            query = query.where(entries.c.type.in_([t.value for t in types]))
        if author_id is not None:
            query = query.where(entries.c.author_id == author_id)
        with self.db.read() as conn:
            return [entry_from_row(r) for r in conn.execute(query).all()]

    def count_by_type(self) -> dict[str, int]:
        with self.db.read() as conn:
            rows = conn.execute(select(entries.c.type, func.count()).group_by(entries.c.type))
            return {t: int(n) for t, n in rows}

    # ------------------------------------------------------------------ cursors

    def _advance(self, conn: Connection, worker_id: int, old: int, new: int) -> bool:
        moved = conn.execute(
            update(workers)
            .where(workers.c.id == worker_id, workers.c.entry_cursor == old)
            .values(entry_cursor=new)
        )
        return moved.rowcount == 1

    def _cursor_and_head(self, worker_id: int) -> tuple[int, int]:
        with self.db.read() as conn:
            cursor = conn.execute(
                select(workers.c.entry_cursor).where(workers.c.id == worker_id)
            ).scalar_one()
            head = conn.execute(select(func.coalesce(func.max(entries.c.id), 0))).scalar_one()
        return int(cursor), int(head)

    def feed(self, worker_id: int, limit: int = 100) -> list[Entry]:
        """Every peer entry after the cursor, oldest first, at most `limit`; the cursor moves
        past exactly what was returned (nothing is skipped, nothing repeats)."""
        limit = max(1, min(limit, 1000))
        while True:
            cursor, head = self._cursor_and_head(worker_id)
            if head <= cursor:
                return []
            with self.db.read() as conn:
                rows = conn.execute(
                    ENTRY_SELECT.where(
                        entries.c.id > cursor,
                        entries.c.id <= head,
                        entries.c.author_id != worker_id,
                    )
                    .order_by(entries.c.id)
                    .limit(limit)
                ).all()
            new_cursor = rows[-1].id if len(rows) == limit else head
            with self.db.write() as conn:
                if not self._advance(conn, worker_id, cursor, new_cursor):
                    continue
            return [entry_from_row(r) for r in rows]

    # ------------------------------------------------------------------ grep

    def grep(
        self,
        pattern: str,
        *,
        ignore_case: bool = False,
        types: Sequence[EntryType] = (),
        author_id: int | None = None,
        since: float | None = None,
        until: float | None = None,
        after_id: int | None = None,
        before_id: int | None = None,
        limit: int = 20,
        use_index: bool = True,
    ) -> GrepResult:
        """Entries whose body or scope matches `pattern` (RE2), newest first. `use_index=False`
        skips the trigram prefilter (a plain newest-first scan: the benchmarks' baseline)."""
        if not 1 <= limit <= MAX_GREP_LIMIT:
            raise InvalidInput(f"limit must be 1 to {MAX_GREP_LIMIT}; got {limit}")
        compiled = compile_pattern(pattern, ignore_case=ignore_case)
        if not use_index:
            compiled = Pattern(compiled.source, compiled.regex, ())
        filters: list[Any] = []
        if types:
            filters.append(entries.c.type.in_([t.value for t in types]))
        if author_id is not None:
            filters.append(entries.c.author_id == author_id)
        if since is not None:
            filters.append(entries.c.created_at >= since)
        if until is not None:
            filters.append(entries.c.created_at <= until)
        if after_id is not None:
            filters.append(entries.c.id > after_id)
        found: list[Entry] = []
        scanned = 0
        for batch in self._candidates(compiled, filters, before_id, limit):
            for row in batch:
                scanned += 1
                if compiled.search(f"{row.body}\n{row.scope}" if row.scope else row.body):
                    found.append(entry_from_row(row))
                    if len(found) > limit:
                        return GrepResult(
                            tuple(found[:limit]), True, bool(compiled.literals), scanned
                        )
        return GrepResult(tuple(found), False, bool(compiled.literals), scanned)

    def _candidates(
        self, pattern: Pattern, filters: list[Any], before_id: int | None, limit: int = 20
    ) -> Iterator[list[Row[Any]]]:
        """Batches of rows, newest first, that may match; the index narrows them when it can.
        Batches grow (64, 256, ... 2000 rows) so a grep that finds its `limit` among the newest
        candidates reads few rows."""
        upper = before_id
        size = min(SCAN_BATCH, max(FIRST_BATCH, 2 * (limit + 1)))
        with self.db.read() as conn:
            if pattern.literals and not self.db.is_sqlite:
                # First the newest PROBE_WINDOW ids by a backward walk of the primary key: a
                # common literal is found there at once, where the GIN bitmap would first
                # collect and recheck every row holding it (0.7 s for 100k of 1M rows).
                top = upper
                if top is None:
                    top = (
                        int(
                            conn.execute(
                                select(func.coalesce(func.max(entries.c.id), 0))
                            ).scalar_one()
                        )
                        + 1
                    )
                conn.execute(text("SET LOCAL enable_bitmapscan = off"))
                literal_filters = self._literal_filters(pattern.literals, top)

                def probe(high: int, low: int) -> list[Row[Any]]:
                    query = (
                        ENTRY_SELECT.where(*filters, entries.c.id < high, entries.c.id > low)
                        .where(*literal_filters)
                        .order_by(entries.c.id.desc())
                    )
                    return list(conn.execute(query).all())

                floor = top - PROBE_WINDOW
                rows = probe(top, floor)
                if rows:
                    yield rows
                    # A literal seen in the window but not often enough: if its density says
                    # the limit is within PROBE_MAX ids, keep walking the key (its trigrams may
                    # be common ones, whose GIN scan and recheck cost ~1 s over 1M rows).
                    need = int(PROBE_WINDOW * (limit + 1) * 1.5 / len(rows))
                    if floor > 0 and len(rows) <= limit and need <= PROBE_MAX:
                        more = probe(floor + 1, top - need)
                        floor = top - need
                        if more:
                            yield more
                if floor <= 0:
                    return
                upper = floor + 1
                # Then the rest by the trigram GIN index, not a backward walk of the key.
                conn.execute(text("SET LOCAL enable_bitmapscan = on"))
                conn.execute(text("SET LOCAL enable_indexscan = off"))
            while True:
                if pattern.literals and self.db.is_sqlite:
                    # Ask FTS5 itself for the newest `size` candidate ids (it walks its doclists
                    # backwards and stops): an `id IN (MATCH ...)` subquery would first collect
                    # every id holding a common literal.
                    ids = self._fts_ids(conn, pattern.literals, upper, size)
                    if not ids:
                        return
                    query = ENTRY_SELECT.where(entries.c.id.in_(ids), *filters)
                    rows = list(conn.execute(query.order_by(entries.c.id.desc())).all())
                    if rows:
                        yield list(rows)
                    if len(ids) < size:
                        return
                    upper = ids[-1]
                else:
                    query = ENTRY_SELECT.where(*filters)
                    if upper is not None:
                        query = query.where(entries.c.id < upper)
                    if pattern.literals:
                        query = query.where(*self._literal_filters(pattern.literals, upper))
                    rows = list(conn.execute(query.order_by(entries.c.id.desc()).limit(size)).all())
                    if not rows:
                        return
                    yield list(rows)
                    if len(rows) < size:
                        return
                    upper = rows[-1].id
                size = min(SCAN_BATCH, size * 4)

    @staticmethod
    def _fts_phrase(literals: Sequence[str]) -> str:
        return " AND ".join('"' + lit.replace('"', '""') + '"' for lit in literals)

    def _fts_ids(
        self, conn: Connection, literals: Sequence[str], upper: int | None, size: int
    ) -> list[int]:
        """The newest `size` ids (below `upper`) whose body or scope holds every literal."""
        match = "SELECT rowid FROM entries_fts WHERE entries_fts MATCH :phrase"
        if upper is not None:
            match += " AND rowid < :upper"
        match += " ORDER BY rowid DESC LIMIT :size"
        params = {"phrase": self._fts_phrase(literals), "size": size, **_maybe(upper=upper)}
        return [int(r) for r in conn.execute(text(match), params).scalars()]

    def _literal_filters(self, literals: Sequence[str], upper: int | None) -> list[Any]:
        if self.db.is_sqlite:
            match = "SELECT rowid FROM entries_fts WHERE entries_fts MATCH :phrase"
            if upper is not None:
                match += " AND rowid < :upper"
            phrase = self._fts_phrase(literals)
            return [entries.c.id.in_(text(match).bindparams(phrase=phrase, **_maybe(upper=upper)))]
        out = []
        for lit in literals:
            like = "%" + lit.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            out.append(or_(entries.c.body.ilike(like), entries.c.scope.ilike(like)))
        return out


def _lapse(claim_id: int, lease_until: float, end_reason: str | None, now: float) -> str:
    """Why a claim no longer fences its owner's work ("" while it does): its lease ended, or
    the hub declared its owner dead. A claim completed, failed or released is not lapsed."""
    if end_reason is not None:
        return f"claim #{claim_id} ended as {end_reason}" if end_reason.startswith("lapsed") else ""
    if lease_until <= now:
        return f"claim #{claim_id} lapsed {now - lease_until:.0f}s ago (its lease ended)"
    return ""


def _maybe(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _claim(row: Row[Any], **override: Any) -> Claim:
    values = {
        "id": row.id,
        "owner": row.owner,
        "owner_id": row.owner_id,
        "scope": _split(row.scope),
        "created_at": row.created_at,
        "lease_until": row.lease_until,
        "ended_at": row.ended_at,
        "end_reason": row.end_reason,
        "ended_by": row.ended_by,
        "body": row.body,
    }
    values.update(override)
    return Claim(**values)
