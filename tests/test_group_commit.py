"""Group commit: appends that arrive together are written in one transaction, and each call still
gets exactly its own answer (entry, overlaps, errors) and its own delivery block."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from swarm.bootstrap import Runtime
from swarm.context import EntryType
from swarm.context.model import PendingEntry
from swarm.context.schema import entries, workers
from swarm.errors import NotFound
from swarm.hub.group_commit import Appended, GroupCommit
from swarm.hub.server import BackgroundHub
from swarm.registry import Worker
from swarm.tools.client import HubClient


def pending(runtime: Runtime, w: Worker, type: str, body: str, **kw: Any) -> PendingEntry:
    return runtime.context.prepare(w.id, type, body, kw.get("scope"), kw.get("refs"), None, w.name)


def gather(group: GroupCommit, items: list[PendingEntry]) -> list[Appended | BaseException]:
    """Submit every item in one turn of the loop, as concurrent calls would."""

    async def main() -> list[Appended | BaseException]:
        return await asyncio.gather(*(group.append(p) for p in items), return_exceptions=True)

    return asyncio.run(main())


def cursor(runtime: Runtime, w: Worker) -> int:
    with runtime.db.read() as conn:
        return int(
            conn.execute(select(workers.c.entry_cursor).where(workers.c.id == w.id)).scalar_one()
        )


def workers_of(runtime: Runtime, n: int) -> list[Worker]:
    return [runtime.registry.register()[0] for _ in range(n)]


def test_calls_that_arrive_together_share_one_transaction(runtime: Runtime) -> None:
    a, b, c = workers_of(runtime, 3)
    group = GroupCommit(runtime, inline=False)  # every call in one batch
    seed = runtime.context.append(c.id, "FACT", "the lexer is table driven").entry
    got = gather(group, [pending(runtime, w, "OBSERVED", f"from {w.name}") for w in (a, b, a)])
    group.close()
    assert (group.batches, group.calls) == (1, 3)
    assert all(isinstance(g, Appended) for g in got)
    done = [g for g in got if isinstance(g, Appended)]
    ids = [g.result.entry.id for g in done]
    assert ids == sorted(ids) and ids[0] > seed.id  # written in call order, after the seed
    assert [g.result.entry.author for g in done] == [a.name, b.name, a.name]
    # Each worker is shown the seed once: a's second call in the batch gets nothing again.
    assert [e.id for e in done[0].delivery.entries.shown] == [seed.id]
    assert [e.id for e in done[1].delivery.entries.shown] == [seed.id]
    assert done[2].delivery.entries.shown == ()
    # The batch's own entries reach the others at their next call, exactly once.
    later = runtime.deliverer.collect(b.id)
    assert [e.id for e in later.entries.shown] == [ids[2], ids[0]]
    assert runtime.deliverer.collect(b.id).entries.shown == ()


def test_sparse_calls_on_sqlite_are_written_at_once_and_a_flood_is_batched(
    runtime: Runtime,
) -> None:
    if not runtime.db.is_sqlite:
        pytest.skip("PostgreSQL always writes from the writer thread")
    a, b = workers_of(runtime, 2)
    group = GroupCommit(runtime)
    got = gather(group, [pending(runtime, w, "OBSERVED", f"from {w.name}") for w in (a, b, a)])
    assert (group.batches, group.calls) == (3, 3)  # one transaction each, no waiting
    done = [g for g in got if isinstance(g, Appended)]
    assert [[e.author for e in g.delivery.entries.shown] for g in done] == [[], [a.name], [b.name]]
    # A flood (more than BUSY_CALLS within BUSY_WINDOW) goes to the writer in batches.
    flood = gather(group, [pending(runtime, (a, b)[n % 2], "OBSERVED", f"{n}") for n in range(200)])
    group.close()
    assert all(isinstance(g, Appended) for g in flood)
    assert group.calls == 203 and group.batches < 3 + 200


def test_a_call_with_missing_refs_fails_alone_and_keeps_its_delivery(runtime: Runtime) -> None:
    a, b, c = workers_of(runtime, 3)
    seed = runtime.context.append(c.id, "FACT", "seed").entry
    before = cursor(runtime, b)
    group = GroupCommit(runtime, inline=False)  # every call in one batch
    got = gather(
        group,
        [
            pending(runtime, a, "OBSERVED", "fine"),
            pending(runtime, b, "FACT", "refers to nothing", refs=[seed.id + 1000]),
            pending(runtime, c, "OBSERVED", "also fine"),
        ],
    )
    group.close()
    assert isinstance(got[1], NotFound) and f"#{seed.id + 1000}" in got[1].message
    assert isinstance(got[0], Appended) and isinstance(got[2], Appended)
    with runtime.db.read() as conn:
        bodies = set(conn.execute(select(entries.c.body)).scalars())
    assert bodies == {"seed", "fine", "also fine"}
    assert cursor(runtime, b) == before  # b's delivery was not taken by the failed call
    assert [e.id for e in runtime.deliverer.collect(b.id).entries.shown][-1] == seed.id


def test_later_claim_in_a_batch_sees_the_earlier_one(runtime: Runtime) -> None:
    a, b = workers_of(runtime, 2)
    group = GroupCommit(runtime, inline=False)  # every call in one batch
    got = gather(
        group,
        [
            pending(runtime, a, "CLAIM", "the parser", scope=["src/parser/**"]),
            pending(runtime, b, "CLAIM", "the lexer", scope=["src/parser/lexer.py"]),
        ],
    )
    group.close()
    first, second = (g for g in got if isinstance(g, Appended))
    assert first.result.overlaps == ()
    assert [c.id for c in second.result.overlaps] == [first.result.entry.id]
    assert {c.id for c in runtime.context.claims()} == {
        first.result.entry.id,
        second.result.entry.id,
    }


def test_a_summary_in_a_batch_ends_a_claim_made_earlier_in_it(runtime: Runtime) -> None:
    (a,) = workers_of(runtime, 1)
    claim = runtime.context.append(a.id, "CLAIM", "cache", scope=["src/cache.py"]).entry
    group = GroupCommit(runtime, inline=False)  # every call in one batch
    got = gather(
        group,
        [
            pending(runtime, a, "PATCH_SUMMARY", "cache evicts LRU; 9 tests pass", refs=[claim.id]),
            pending(runtime, a, "OBSERVED", "cache hit rate 0.93"),
        ],
    )
    group.close()
    done = [g for g in got if isinstance(g, Appended)]
    assert [c.id for c in done[0].result.ended] == [claim.id]
    assert done[0].result.entry.type is EntryType.PATCH_SUMMARY
    assert runtime.context.claims() == []


def test_an_unexpected_database_error_is_retried_call_by_call(runtime: Runtime) -> None:
    a, b = workers_of(runtime, 2)
    ghost = PendingEntry(10**9, "ghost", EntryType.OBSERVED, "no such author", (), (), 300.0)
    group = GroupCommit(runtime, inline=False)  # every call in one batch
    got = gather(
        group,
        [
            pending(runtime, a, "OBSERVED", "first"),
            ghost,  # the foreign key fails the batch's INSERT
            pending(runtime, b, "OBSERVED", "third"),
        ],
    )
    group.close()
    assert isinstance(got[0], Appended) and isinstance(got[2], Appended)
    assert isinstance(got[1], Exception) and not isinstance(got[1], NotFound)
    with runtime.db.read() as conn:
        bodies = list(conn.execute(select(entries.c.body).order_by(entries.c.id)).scalars())
    assert bodies == ["first", "third"]


def test_concurrent_http_appends_are_batched(
    hub: BackgroundHub, new_worker: Callable[[], HubClient]
) -> None:
    clients = [new_worker() for _ in range(16)]
    tokens = [c.token for c in clients]
    names = [c.call("GET", "/v1/whoami")["result"]["name"] for c in clients]
    group: GroupCommit = hub.server.config.app.state.group_commit
    group.inline = False  # batch every time, also on SQLite (a flood there is batched anyway)

    async def main() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as http:

            async def one(n: int) -> dict[str, Any]:
                r = await http.post(
                    "/v1/entries",
                    json={"type": "OBSERVED", "body": f"call {n}"},
                    headers={"Authorization": f"Bearer {tokens[n % len(tokens)]}"},
                )
                r.raise_for_status()
                answer: dict[str, Any] = r.json()
                return answer

            return await asyncio.gather(*(one(n) for n in range(160)))

    answers = asyncio.run(main())
    ids = [a["result"]["entry"]["id"] for a in answers]
    assert len(set(ids)) == 160
    assert group.calls == 160
    assert group.batches < group.calls  # some calls shared a transaction
    # Across all answers, no worker was shown an entry twice, or one of its own.
    for k, name in enumerate(names):
        mine = [a for n, a in enumerate(answers) if n % len(tokens) == k]
        shown = [e for a in mine for e in a["delivery"]["entries"]]
        assert len({e["id"] for e in shown}) == len(shown)
        assert all(e["author"] != name for e in shown)


def test_direct_messages_ride_on_the_batch_once(runtime: Runtime) -> None:
    a, b = workers_of(runtime, 2)
    runtime.messages.direct("hub", b, "please look at the lexer")
    group = GroupCommit(runtime, inline=False)  # every call in one batch
    got = gather(
        group,
        [
            pending(runtime, a, "OBSERVED", "a's note"),
            pending(runtime, b, "OBSERVED", "b's note"),
            pending(runtime, b, "OBSERVED", "b's second note"),
        ],
    )
    group.close()
    done = [g for g in got if isinstance(g, Appended)]
    assert done[0].delivery.messages == ()
    assert [m.body for m in done[1].delivery.messages] == ["please look at the lexer"]
    assert done[2].delivery.messages == ()
    assert runtime.deliverer.collect(b.id).messages == ()


def test_deliveries_of_a_batch_match_a_worker_by_worker_reading(runtime: Runtime) -> None:
    """Many workers collected at once, with cursors apart and their own entries among the
    newest (so the shared page must be read further for some): each gets exactly the newest
    `cap` peers' entries past its cursor, and the count of the rest."""
    cap = runtime.deliverer.cap
    crew = workers_of(runtime, 6)
    rng = random.Random(7)
    log: list[tuple[int, int]] = []  # (entry id, author id), every entry written
    cursors = {w.id: 0 for w in crew}
    for _round in range(40):
        # A burst of entries, sometimes all from one worker (more than a page of its own).
        author = rng.choice(crew)
        for _ in range(rng.choice((1, 3, 2 * cap + 3))):
            writer = author if rng.random() < 0.7 else rng.choice(crew)
            entry = runtime.context.append(writer.id, "OBSERVED", f"note {len(log)}").entry
            log.append((entry.id, writer.id))
        taking = rng.sample(crew, rng.randint(1, len(crew)))
        with runtime.db.write() as conn:
            got = runtime.deliverer.collect_many(conn, [w.id for w in taking])
        head = log[-1][0]
        for w in taking:
            new = [i for i, a in reversed(log) if cursors[w.id] < i <= head and a != w.id]
            shown = got[w.id].entries
            assert [e.id for e in shown.shown] == new[:cap]
            assert shown.more == len(new) - len(new[:cap])
            cursors[w.id] = head
    assert {w.id: cursor(runtime, w) for w in crew} == cursors


def test_many_batches_deliver_every_entry_exactly_once(runtime: Runtime) -> None:
    """Small batches, every worker with calls in several of them: across all its answers and
    one last collect, each worker is given every peer's entry once (shown, or counted in "more"
    beyond the cap), and none of its own."""
    crew = workers_of(runtime, 5)
    group = GroupCommit(runtime, max_batch=3, inline=False)
    calls = [pending(runtime, crew[i % 5], "OBSERVED", f"note {i}") for i in range(60)]
    got = gather(group, calls)
    group.close()
    assert group.batches >= 20
    done = [g for g in got if isinstance(g, Appended)]
    assert len(done) == 60 and len({g.result.entry.id for g in done}) == 60
    author_of = {g.result.entry.id: g.result.entry.author for g in done}
    for w in crew:
        blocks = [
            g.delivery.entries for g, c in zip(done, calls, strict=True) if c.author_id == w.id
        ]
        blocks.append(runtime.deliverer.collect(w.id).entries)
        shown = [e.id for b in blocks for e in b.shown]
        assert len(shown) == len(set(shown))  # never twice
        assert all(author_of[i] != w.name for i in shown)  # never its own
        given = sum(len(b.shown) + b.more for b in blocks)
        assert given == sum(1 for a in author_of.values() if a != w.name)  # every peer's, once
