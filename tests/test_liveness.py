"""Dead workers: a worker silent for SWARM_DEAD_AFTER seconds loses its claims and sessions at
once, peers are told, and the counters say so."""

from __future__ import annotations

from pathlib import Path

from swarm.context import EntryType
from swarm.db import Database
from swarm.hub.liveness import CLAIM_ENDING, sweep
from tests.conftest import FakeClock, make_runtime


def test_a_silent_worker_is_dead_its_claims_and_sessions_end(
    db: Database, tmp_path: Path, clock: FakeClock
) -> None:
    runtime = make_runtime(db, tmp_path, clock, dead_after=30)
    quiet, alive = runtime.registry.register()[0], runtime.registry.register()[0]
    never = runtime.registry.register()[0]  # registered, never reported: not judged
    for worker in (quiet, alive):
        runtime.registry.report(worker, "in_session", {})
    claim = runtime.context.append(quiet.id, EntryType.CLAIM, "unit 3", scope=["src/a.py"])
    runtime.context.append(alive.id, EntryType.CLAIM, "unit 4", scope=["src/b.py"])
    session_id, _ = runtime.run.start_session(quiet.id, "sim", None)
    clock.advance(20)
    runtime.registry.report(alive, "in_session", {})
    assert sweep(runtime) == []
    clock.advance(11)  # quiet: 31 s silent; alive: 11 s
    deaths = sweep(runtime)
    assert [d.worker for d in deaths] == [quiet.name]
    assert deaths[0].claims == (claim.entry.id,) and deaths[0].sessions == 1
    ended = runtime.context.claim(claim.entry.id)
    assert ended.end_reason == CLAIM_ENDING and ended.ended_at == clock.now
    assert [c.owner for c in runtime.context.claims()] == [alive.name]
    (session,) = [s for s in runtime.run.sessions() if s.id == session_id]
    assert session.ended == "lost" and "heartbeats" in session.detail
    states = {w.name: w.state for w in runtime.registry.list()}
    assert states == {quiet.name: "dead", alive.name: "in_session", never.name: "registered"}
    claims = runtime.run.summary()["claims"]
    assert claims["lapsed"] == 1 and claims["active"] == 1
    posts = runtime.messages.take_channel(alive).messages
    assert any(f"{quiet.name} is dead" in p.body and f"#{claim.entry.id}" in p.body for p in posts)
    # Declared once; a worker that comes back reports again and is alive.
    assert sweep(runtime) == []
    runtime.registry.report(quiet, "idle", {})
    assert {w.name: w.state for w in runtime.registry.list()}[quiet.name] == "idle"


def test_a_worker_whose_calls_reach_the_hub_is_alive_without_a_heartbeat(
    db: Database, tmp_path: Path, clock: FakeClock
) -> None:
    # At 256 workers the hub got to heartbeats late and declared workers dead that were calling
    # it all along: every call the hub serves now counts as a heartbeat.
    runtime = make_runtime(db, tmp_path, clock, dead_after=30)
    busy, token = runtime.registry.register()
    silent = runtime.registry.register()[0]
    for worker in (busy, silent):
        runtime.registry.report(worker, "in_session", {})
    clock.advance(25)
    assert runtime.registry.authenticate(token) == busy  # a call: `sw`, git, anything
    assert runtime.registry.flush_activity() == 1
    assert runtime.registry.flush_activity() == 0  # recorded once
    clock.advance(10)  # 35 s since either reported; busy called 10 s ago
    assert [d.worker for d in sweep(runtime)] == [silent.name]
    heard = {w.name: w.heartbeat_at for w in runtime.registry.list()}
    assert heard[busy.name] == clock.now - 10
    # A flush never moves a later heartbeat back.
    runtime.registry.authenticate(token)
    clock.advance(1)
    runtime.registry.report(busy, "idle", {})
    runtime.registry.flush_activity()
    assert {w.name: w.heartbeat_at for w in runtime.registry.list()}[busy.name] == clock.now
