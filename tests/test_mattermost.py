"""The Mattermost adapter: bots, spec-validated traffic, cursors in the hub's DB, latency."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
from contract.harness import hub_database, standin_messages
from contract.spec import MATTERMOST_DRIFT, SpecCheck, ValidatingTransport, mattermost_spec
from sqlalchemy import select
from standins.mattermost import MattermostStandin
from standins.serve import loopback

from swarm.errors import Unauthorized
from swarm.messages.mattermost import MattermostMessages, mattermost_accounts, message_id
from swarm.registry import Registry


def test_workers_are_bots_with_tokens_kept_in_the_hub_database(tmp_path: Path) -> None:
    h = standin_messages(tmp_path)
    a, b = h.new_worker(), h.new_worker()
    h.messages.direct(a, b, "hello")
    standin: MattermostStandin = h.standin  # type: ignore[attr-defined]
    bots = [u for u in standin.users.values() if u.get("is_bot")]
    assert sorted(u["username"] for u in bots) == [a.name, b.name]
    messages: MattermostMessages = h.messages  # type: ignore[assignment]
    with messages.db.read() as conn:
        rows = conn.execute(select(mattermost_accounts.c.worker)).scalars().all()
    assert sorted(rows) == [a.name, b.name]
    check: SpecCheck = h.check  # type: ignore[attr-defined]
    assert ("post", "/api/v4/bots", 201) in check.seen
    assert any(k[0] == "post" and k[1].endswith("/tokens") and k[2] == 200 for k in check.seen)
    for undo in h.cleanup:
        undo()


def test_a_bad_admin_token_is_unauthorized(tmp_path: Path) -> None:
    standin = MattermostStandin()
    standin.ensure_team("swarm")
    with loopback(standin.app) as url, pytest.raises(Unauthorized):
        MattermostMessages(url, "wrong-token-0123456789", hub_database(tmp_path))


def test_message_ids_follow_time() -> None:
    early = message_id({"id": "z" * 26, "create_at": 1_700_000_000_000})
    late = message_id({"id": "a" * 26, "create_at": 1_700_000_000_001})
    assert early < late < 2**53  # safe in JSON for JavaScript readers too


def test_delivery_latency_over_loopback(tmp_path: Path) -> None:
    """From `direct` returning to `take_direct` handing it out, over HTTP on 127.0.0.1."""
    standin = MattermostStandin()
    standin.ensure_team("swarm")
    token = next(iter(standin.tokens))
    db = hub_database(tmp_path)
    registry = Registry(db)
    with loopback(standin.app) as url:
        from httpx import HTTPTransport

        check = SpecCheck(mattermost_spec(), MATTERMOST_DRIFT)
        transport = ValidatingTransport(HTTPTransport(), check)
        messages = MattermostMessages(url, token, db, transport=transport)
        workers = [registry.register()[0] for _ in range(6)]
        target = workers[0]
        for peer in workers[1:]:
            messages.direct(peer, target, "warm-up")  # five DM channels to poll
        messages.take_direct(target)
        latencies = []
        for i in range(20):
            messages.direct(workers[1 + i % 5], target, f"ping {i}")
            started = time.perf_counter()
            got = messages.take_direct(target)
            latencies.append(time.perf_counter() - started)
            assert [m.body for m in got] == [f"ping {i}"]
    median = statistics.median(latencies)
    print(f"take_direct latency over loopback: median {median * 1000:.1f} ms")
    assert median < 1.0
