"""The shared-context store, on SQLite and PostgreSQL alike (one parametrized suite)."""

from __future__ import annotations

import time

import pytest
from conftest import FakeClock
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from swarm.context import ContextStore, EntryType
from swarm.context.schema import claims, entries
from swarm.db import Database
from swarm.delivery import Deliverer
from swarm.errors import Conflict, Forbidden, InvalidInput, NotFound
from swarm.registry import Registry


@pytest.fixture
def registry(db: Database) -> Registry:
    return Registry(db)


@pytest.fixture
def store(db: Database, clock: FakeClock) -> ContextStore:
    return ContextStore(db, clock=clock, lease_seconds=300, body_limit=1000)


def count_entries(db: Database) -> int:
    with db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(entries)).scalar_one())


def test_append_returns_entry_with_commit_ordered_ids(
    store: ContextStore, registry: Registry
) -> None:
    worker, _ = registry.register()
    first = store.append(worker.id, "OBSERVED", "tests fail on import").entry
    second = store.append(worker.id, EntryType.FACT, "the module name is inflection").entry
    assert second.id > first.id
    assert first.author == worker.name and first.type is EntryType.OBSERVED
    assert store.get(second.id).body == "the module name is inflection"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"type": "GUESS", "body": "x"}, "unknown entry type 'GUESS'"),
        ({"type": "FACT", "body": "   "}, "the body is empty"),
        ({"type": "FACT", "body": "x" * 1001}, "the limit is 1000"),
        ({"type": "FACT", "body": "x", "scope": "src/a.py"}, "scope must be a list of strings"),
        ({"type": "FACT", "body": "x", "scope": [1]}, "scope items must be strings"),
        ({"type": "FACT", "body": "x", "refs": [999]}, "do not exist: #999"),
        ({"type": "FACT", "body": "x", "refs": ["a"]}, "refs must be positive entry ids"),
        ({"type": "CLAIM", "body": "x"}, "a CLAIM needs a scope"),
        ({"type": "FACT", "body": "x", "scope": ["../etc/passwd"]}, "inside the repository"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    store: ContextStore, registry: Registry, db: Database, kwargs: dict[str, object], message: str
) -> None:
    worker, _ = registry.register()
    before = count_entries(db)
    fields = dict(kwargs)
    with pytest.raises((InvalidInput, NotFound)) as info:
        store.append(worker.id, fields.pop("type"), fields.pop("body"), **fields)  # type: ignore[arg-type]
    assert message in info.value.message
    assert count_entries(db) == before


@pytest.mark.parametrize("statement", ["UPDATE entries SET body = 'forged'", "DELETE FROM entries"])
def test_entries_are_append_only_in_sql(
    store: ContextStore, registry: Registry, db: Database, statement: str
) -> None:
    worker, _ = registry.register()
    entry = store.append(worker.id, "FACT", "original").entry
    with pytest.raises(DBAPIError, match="append-only"), db.write() as conn:
        conn.execute(text(statement))
    assert store.get(entry.id).body == "original"


def test_claim_lists_overlapping_claims_of_others(store: ContextStore, registry: Registry) -> None:
    a, _ = registry.register()
    b, _ = registry.register()
    first = store.append(a.id, "CLAIM", "parser", scope=["src/parser/**"])
    assert first.overlaps == ()
    unrelated = store.append(b.id, "CLAIM", "docs", scope=["docs/*.md"])
    assert unrelated.overlaps == ()
    second = store.append(b.id, "CLAIM", "lexer fix", scope=["src/parser/lexer.py"])
    assert [c.id for c in second.overlaps] == [first.entry.id]
    topic = store.append(a.id, "CLAIM", "errors", scope=["topic:Error-Messages"])
    assert store.append(b.id, "CLAIM", "e", scope=["topic:error-messages"]).overlaps[0].id == (
        topic.entry.id
    )


def test_patch_summary_and_fail_end_own_claims(store: ContextStore, registry: Registry) -> None:
    a, _ = registry.register()
    b, _ = registry.register()
    done = store.append(a.id, "CLAIM", "lexer", scope=["src/lexer.py"]).entry
    failed = store.append(a.id, "CLAIM", "parser", scope=["src/parser.py"]).entry
    others = store.append(b.id, "CLAIM", "docs", scope=["docs"]).entry
    ended = store.append(a.id, "PATCH_SUMMARY", "lexer done", refs=[done.id, others.id]).ended
    assert [(c.id, c.end_reason) for c in ended] == [(done.id, "completed")]
    assert store.append(a.id, "FAIL", "parser too hard", refs=[failed.id]).ended[0].end_reason == (
        "failed"
    )
    assert [c.id for c in store.claims()] == [others.id]  # b's claim is not a's to end
    assert [e.id for e in store.referrers(done.id)] == [done.id + 3]


def test_renew_extends_a_live_lease_and_a_lapsed_claim_is_fenced(
    store: ContextStore, registry: Registry, clock: FakeClock
) -> None:
    a, _ = registry.register()
    claim = store.append(a.id, "CLAIM", "x", scope=["x.py"], lease_seconds=60).entry
    clock.advance(50)
    store.renew(a.id, claim.id, 120)
    clock.advance(100)
    assert store.claims()[0].state(clock()) == "active"
    clock.advance(21)
    assert store.claims() == []
    assert store.claim(claim.id).state(clock()) == "lapsed"
    # Late work under the lapsed claim is refused: renewal, completion, a merge's fence check.
    with pytest.raises(Conflict, match=r"lapsed 1s ago .*make a new CLAIM"):
        store.renew(a.id, claim.id, 120)
    with pytest.raises(Conflict, match=r"lapsed .*before this PATCH_SUMMARY.*nothing was recorded"):
        store.append(a.id, "PATCH_SUMMARY", "done", refs=[claim.id])
    with pytest.raises(Conflict, match="make a new CLAIM"):
        store.check_fence(a.id, claim.id)
    assert store.count_by_type() == {"CLAIM": 1}
    # A FAIL may still end it (saying why the work stopped costs nobody anything).
    store.append(a.id, "FAIL", "gave up", refs=[claim.id])
    assert store.claim(claim.id).end_reason == "failed"
    fresh = store.append(a.id, "CLAIM", "x again", scope=["x.py"]).entry
    assert store.check_fence(a.id, fresh.id).id == fresh.id
    store.append(a.id, "PATCH_SUMMARY", "done", refs=[fresh.id])
    assert store.claim(fresh.id).end_reason == "completed"


def test_release_rules(store: ContextStore, registry: Registry, db: Database) -> None:
    a, _ = registry.register()
    b, _ = registry.register()
    claim = store.append(a.id, "CLAIM", "x", scope=["x.py"]).entry
    with pytest.raises(Forbidden, match="belongs to w"):
        store.release(b.id, claim.id)
    with pytest.raises(NotFound):
        store.release(a.id, 12345)
    store.release(a.id, claim.id)
    with pytest.raises(Conflict, match="already ended"):
        store.release(a.id, claim.id)
    with db.read() as conn:
        assert conn.execute(select(claims.c.end_reason)).scalar_one() == "released"


def test_delivery_shows_peers_newest_first_exactly_once(
    store: ContextStore, registry: Registry
) -> None:
    a, _ = registry.register()
    b, _ = registry.register()
    ids = [store.append(a.id, "OBSERVED", f"finding {i}").entry.id for i in range(5)]
    store.append(b.id, "OBSERVED", "b's own")
    deliver = Deliverer(store.db, cap=3, with_messages=True)
    got = deliver.collect(b.id).entries
    assert [e.id for e in got.shown] == ids[::-1][:3]
    assert got.more == 2 and (got.first_id, got.last_id) == (ids[0], ids[-1] + 1)
    assert deliver.collect(b.id).entries.shown == ()
    again = store.append(a.id, "FACT", "later").entry
    assert [e.id for e in deliver.collect(b.id).entries.shown] == [again.id]


def test_feed_pages_through_everything_in_order(store: ContextStore, registry: Registry) -> None:
    a, _ = registry.register()
    reader, _ = registry.register()
    ids = [store.append(a.id, "OBSERVED", f"e{i}").entry.id for i in range(25)]
    seen: list[int] = []
    while page := store.feed(reader.id, limit=10):
        seen += [e.id for e in page]
    assert seen == ids


def test_grep_regex_filters_and_limits(
    store: ContextStore, registry: Registry, clock: FakeClock
) -> None:
    a, _ = registry.register()
    b, _ = registry.register()
    store.append(a.id, "FACT", "pluralize handles 'octopus' -> 'octopi'", scope=["inflection.py"])
    clock.advance(10)
    store.append(b.id, "FAIL", "Singularize broke on 'news'")
    store.append(b.id, "OBSERVED", "tokenizer drops tabs", scope=["src/lexer.py"])
    assert [e.type for e in store.grep("octop(us|i)").entries] == [EntryType.FACT]
    assert store.grep("lexer").entries[0].scope == ("src/lexer.py",)  # scope is searched too
    assert store.grep("singularize").entries == ()
    assert len(store.grep("singularize", ignore_case=True).entries) == 1
    assert len(store.grep(".", types=[EntryType.FAIL]).entries) == 1
    assert len(store.grep(".", author_id=b.id).entries) == 2
    assert len(store.grep(".", since=clock() - 1).entries) == 2
    limited = store.grep(".", limit=2)
    assert limited.truncated and [e.body[:5] for e in limited.entries] == ["token", "Singu"]
    assert store.grep("pluralize").used_index


def test_grep_refuses_bad_patterns(store: ContextStore) -> None:
    with pytest.raises(InvalidInput, match="invalid regular expression"):
        store.grep("(unclosed")
    with pytest.raises(InvalidInput, match="empty"):
        store.grep("")
    with pytest.raises(InvalidInput, match="limit"):
        store.grep("x", limit=0)


def test_catastrophic_pattern_returns_promptly(store: ContextStore, registry: Registry) -> None:
    a, _ = registry.register()
    for _ in range(20):
        store.append(a.id, "OBSERVED", "a" * 990 + "b")
    started = time.perf_counter()
    result = store.grep("(a+)+$")
    assert result.entries == () and time.perf_counter() - started < 2.0
    assert len(store.grep("(a+)+b$").entries) == 20


def test_claim_counts_by_state(
    store: ContextStore, registry: Registry, db: Database, clock: FakeClock
) -> None:
    from swarm.context.counts import claim_counts

    a, _ = registry.register()
    ids = [
        store.append(a.id, "CLAIM", f"c{i}", scope=[f"f{i}.py"], lease_seconds=60).entry.id
        for i in range(6)
    ]
    store.append(a.id, "PATCH_SUMMARY", "done", refs=[ids[0]])
    store.append(a.id, "FAIL", "no", refs=[ids[1]])
    store.release(a.id, ids[2])
    store.renew(a.id, ids[3], 600)
    clock.advance(120)  # ids[4] and ids[5] lapse; ids[3] is still leased
    with db.read() as conn:
        counts = claim_counts(conn, clock())
    assert counts == {"active": 1, "completed": 1, "failed": 1, "released": 1, "lapsed": 2}
