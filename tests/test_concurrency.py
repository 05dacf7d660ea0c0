"""Cursors never skip and never repeat, under real concurrency over HTTP, on both engines."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from swarm.hub.server import HubProcess

WRITERS = 64
APPENDS = 200
READERS = 8


def register(hub: HubProcess) -> str:
    response = httpx.post(
        hub.url + "/v1/workers",
        json={},
        headers={"Authorization": f"Bearer {hub.operator_token}"},
    )
    response.raise_for_status()
    return str(response.json()["result"]["token"])


def slow_insert(url: str, author_id: int, started: threading.Event, hold: float) -> None:
    """A transaction that draws a lower id and commits only after others tried to append."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO entries (created_at, author_id, type, body) "
                "VALUES (:t, :a, 'OBSERVED', 'slow transaction')"
            ),
            {"t": time.time(), "a": author_id},
        )
        started.set()
        time.sleep(hold)
    engine.dispose()


def run_load(hub: HubProcess, slow_url: str | None) -> None:
    writer_tokens = [register(hub) for _ in range(WRITERS)]
    reader_tokens = [register(hub) for _ in range(READERS)]
    expected = WRITERS * APPENDS + (1 if slow_url else 0)
    seen: list[list[int]] = [[] for _ in range(READERS)]
    errors: list[BaseException] = []
    writing = threading.Barrier(WRITERS + (1 if slow_url else 0))

    def writer(token: str, index: int) -> None:
        try:
            with httpx.Client(
                base_url=hub.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
            ) as client:
                writing.wait()
                for i in range(APPENDS):
                    r = client.post(
                        "/v1/entries", json={"type": "OBSERVED", "body": f"w{index} n{i}"}
                    )
                    r.raise_for_status()
        except BaseException as exc:
            errors.append(exc)

    def reader(token: str, index: int) -> None:
        deadline = time.monotonic() + 240
        try:
            with httpx.Client(
                base_url=hub.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
            ) as client:
                while len(seen[index]) < expected and time.monotonic() < deadline:
                    r = client.get("/v1/feed", params={"limit": 500})
                    if r.status_code == 429:
                        # The hub's per-worker limit on feeds: a well-behaved reader waits as told.
                        time.sleep(float(r.headers["Retry-After"]))
                        continue
                    r.raise_for_status()
                    seen[index] += [e["id"] for e in r.json()["result"]["entries"]]
                    time.sleep(0.01)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t, i)) for i, t in enumerate(writer_tokens)]
    threads += [threading.Thread(target=reader, args=(t, i)) for i, t in enumerate(reader_tokens)]
    if slow_url:
        started = threading.Event()

        def slow() -> None:
            writing.wait()
            time.sleep(0.2)  # let the writers get going first
            slow_insert(slow_url, 1, started, hold=2.0)

        threads.append(threading.Thread(target=slow))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    for ids in seen:
        assert len(ids) == expected, f"a reader saw {len(ids)} of {expected}"
        assert ids == sorted(ids), "a reader saw entries out of order"
        assert len(set(ids)) == expected, "a reader saw an entry twice"
    assert all(ids == seen[0] for ids in seen)


@pytest.mark.slow
def test_readers_see_every_entry_once_in_order_sqlite(tmp_path: Path) -> None:
    with HubProcess(tmp_path / "run") as hub:
        run_load(hub, slow_url=None)


@pytest.mark.postgres
@pytest.mark.slow
def test_readers_see_every_entry_once_in_order_postgres(tmp_path: Path, postgres_url: str) -> None:
    with HubProcess(tmp_path / "run", database_url=postgres_url) as hub:
        run_load(hub, slow_url=postgres_url)
