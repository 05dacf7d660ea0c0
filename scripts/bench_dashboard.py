"""How fast the dashboard answers on a big run: 1,024 workers and a million entries.

Builds the run's database directly (bulk SQL), starts `swarm hub` on it in its own process, and
times each dashboard page and its JSON. Prints p50/p99 per page; `--json` prints one
{"figure", "value", "unit"} object per line; `--quick` (100k entries) finishes within a minute.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from swarm.db import Database
from swarm.hub.server import HubProcess

TYPES = ("OBSERVED", "FACT", "FAIL", "CLAIM", "PATCH_SUMMARY")
WORDS = [
    "parser",
    "lexer",
    "token",
    "error",
    "render",
    "table",
    "cache",
    "header",
    "footnote",
    "list",
    "link",
    "quote",
]


def build(path: Path, workers: int, entries: int, messages: int, start: float) -> None:
    """Fill a fresh hub database with a plausible run, as fast as SQLite allows."""
    Database(f"sqlite:///{path}").create_schema()
    rng = random.Random(7)
    db = sqlite3.connect(path)
    db.execute("PRAGMA synchronous=OFF")
    db.execute("DROP TRIGGER entries_fts_insert")  # index once at the end, not row by row
    span = 4 * 3600.0
    db.executemany(
        "INSERT INTO workers (id, name, token_hash, created_at, model, state, status, heartbeat_at)"
        " VALUES (?, ?, ?, ?, 'sim', ?, '{}', ?)",
        [(i, f"w{i}", f"{i:064x}", start, rng.choice(["idle", "in_session"]), start + span)
         for i in range(1, workers + 1)],
    )  # fmt: skip
    entry_rows, claim_rows = [], []
    for i in range(1, entries + 1):
        kind = TYPES[i % 5] if i % 7 else "OBSERVED"
        author = rng.randint(1, workers)
        when = start + span * i / entries
        scope = f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py" if kind == "CLAIM" else ""
        body = f"{kind.lower()} {i}: {' '.join(rng.choices(WORDS, k=8))}"
        entry_rows.append((i, when, author, kind, body, scope, ""))
        if kind == "CLAIM":
            active = i > entries - 5 * workers  # about one open claim per worker at the end
            lease = start + span + 3600 if active else when + 300
            ended = (None, None) if active else (when + 200, "completed")
            claim_rows.append((i, author, scope, when, lease, *ended))
    db.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)", entry_rows)
    db.executemany(
        "INSERT INTO claims (id, owner_id, scope, created_at, lease_until, ended_at, end_reason)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        claim_rows,
    )
    db.execute("INSERT INTO entries_fts(entries_fts) VALUES ('rebuild')")
    db.executemany(
        "INSERT INTO messages (id, created_at, author_id, author, channel, recipient_id, body)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(i, start + span * i / messages, a, f"w{a}", None if i % 3 else "tasks",
          rng.randint(1, workers) if i % 3 else None, f"message {i}")
         for i in range(1, messages + 1) for a in [rng.randint(1, workers)]],
    )  # fmt: skip
    db.executemany(
        "INSERT INTO sessions (worker_id, number, harness, model, started_at, ended_at, ended,"
        " steps, tokens_in, tokens_out, cost, detail) VALUES (?, ?, 'sim', 'sim', ?, ?, ?, ?, ?,"
        " ?, ?, '')",
        [(w, n, start + n * 600, None if n == 4 else start + n * 600 + 500,
          None if n == 4 else "submitted", 40, 20000, 3000, 0.05)
         for w in range(1, workers + 1) for n in range(1, 5)],
    )  # fmt: skip
    db.executemany(
        "INSERT INTO pull_requests (number, title, body, author_id, author, branch, state,"
        " created_at, head, merged_at, merged_by, merge_commit) VALUES"
        " (?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(n, f"change {n}", a, f"w{a}", f"w{a}/b{n}", "merged" if n % 10 else "open",
          start + n, "0" * 40, start + n + 60 if n % 10 else None,
          f"w{a}" if n % 10 else None, "1" * 40 if n % 10 else None)
         for n in range(1, 2001) for a in [rng.randint(1, workers)]],
    )  # fmt: skip
    db.executemany(
        'INSERT INTO checkpoints (time, "commit", passed, total, duration)'
        " VALUES (?, ?, ?, 100, 1)",
        [(start + 60 * k, f"{k:040x}", min(100, k // 2)) for k in range(240)],
    )
    db.commit()
    db.close()


def pages(workers: int) -> dict[str, str]:
    w = f"w{workers // 2}"
    return {
        "page /dashboard": "/dashboard",
        "overview": "/dashboard/api/overview",
        "entries": "/dashboard/api/entries",
        "entries type=FACT": "/dashboard/api/entries?type=FACT",
        f"entries author={w}": f"/dashboard/api/entries?author={w}",
        "grep": "/dashboard/api/grep?pattern=footnote%20quote%20link",
        "claims": "/dashboard/api/claims",
        "prs": "/dashboard/api/prs",
        "channel": "/dashboard/api/channel",
        "threads": "/dashboard/api/threads",
        "thread": f"/dashboard/api/thread?a=w1&b={w}",
        "worker timeline": f"/dashboard/api/workers/{w}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k entries, fewer requests")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure per line")
    parser.add_argument("--workers", type=int, default=1024)
    parser.add_argument("--entries", type=int, default=None)
    args = parser.parse_args()
    entries = args.entries or (100_000 if args.quick else 1_000_000)
    repeats = 15 if args.quick else 50
    figures: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory(prefix="swarm-bench-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        began = time.perf_counter()
        build(run_dir / "hub.db", args.workers, entries, entries // 10, time.time() - 4 * 3600)
        figures.append(("build database", time.perf_counter() - began, "s"))
        with HubProcess(run_dir) as hub, httpx.Client(base_url=hub.url, timeout=120) as http:
            began = time.perf_counter()
            http.get("/dashboard/api/overview").raise_for_status()  # the counters' first count
            figures.append(
                ("first overview (counting)", 1000 * (time.perf_counter() - began), "ms")
            )
            for name, path in pages(args.workers).items():
                times = []
                for _ in range(repeats):
                    began = time.perf_counter()
                    http.get(path).raise_for_status()
                    times.append(1000 * (time.perf_counter() - began))
                times.sort()
                figures.append((f"{name} p50", statistics.median(times), "ms"))
                figures.append(
                    (f"{name} p99", times[min(len(times) - 1, int(0.99 * len(times)))], "ms")
                )
    if args.json:
        for name, value, unit in figures:
            print(json.dumps({"figure": name, "value": round(value, 2), "unit": unit}))
    else:
        print(
            f"dashboard on {args.workers} workers, {entries:,} entries "
            f"({repeats} requests per page)"
        )
        print(f"{'figure':<34}{'value':>10}  unit")
        for name, value, unit in figures:
            print(f"{name:<34}{value:>10.1f}  {unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
