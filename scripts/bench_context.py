"""Shared-context throughput and grep, on SQLite and PostgreSQL.

For each engine:
  * appends/s and p50/p99 latency of POST /v1/entries through a `swarm hub` process with 256
    concurrent clients (each registered as its own worker, with its own token), and the same
    hub's requests/s on GET /v1/ping (authenticated no-op, no database: the HTTP ceiling) in
    the same run, and their ratio. Load: Python asyncio + httpx from this process (one
    AsyncClient per client) and, when installed, wrk (C; 256 connections, tokens rotated).
  * grep p50 over N entries (default 1,000,000, bulk-loaded) for a rare literal, a common regex
    and a case-insensitive pattern, next to two baselines measured in the same run:
      - "full scan": every row streamed from the table (raw driver cursor) and the same RE2
        pattern applied to body+scope: what a grep without any index costs for a pattern that
        matches rarely (it must read everything);
      - "no index": the store's own grep with the trigram prefilter disabled (the same
        newest-first batched walk, stopping at the limit).

    .venv/bin/python scripts/bench_context.py [--quick] [--json] [--engine sqlite|postgres|both]
        [--load httpx|wrk|both] [--entries N] [--clients 256] [--seconds 10] [--profile DIR]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _bench as B

RARE = "XK7-frobnicate-overflow"
RARE_ROWS = 10
PATTERNS = (
    # name, pattern, ignore_case
    ("rare literal", RARE, False),
    ("common regex", r"timeout after \d+ms", False),
    ("case-insensitive", "deadlock detected", True),
    ("mid-frequency literal", "cache lock", False),  # ~0.4% of rows, common trigrams
)

WORDS = [
    "cache",
    "index",
    "parser",
    "scheduler",
    "worker",
    "lease",
    "cursor",
    "merge",
    "branch",
    "commit",
    "token",
    "retry",
    "backoff",
    "queue",
    "socket",
    "buffer",
    "config",
    "schema",
    "migration",
    "fixture",
    "snapshot",
    "vacuum",
    "checkpoint",
    "replica",
    "handler",
    "router",
    "session",
    "payload",
    "digest",
    "channel",
    "claim",
    "scope",
    "entry",
    "delivery",
    "heartbeat",
    "registry",
    "workspace",
    "compiler",
    "lexer",
    "tokenizer",
    "allocator",
    "arena",
    "pool",
    "thread",
    "lock",
    "mutex",
    "future",
    "promise",
    "stream",
    "encoder",
    "decoder",
    "frame",
    "header",
    "checksum",
    "manifest",
    "bundle",
]
MODULES = ("context", "hub", "messages", "workspace", "tasks", "worker", "db", "tools", "eval")
VERBS = ("flush", "retri", "lock", "pars", "merg", "rebas", "cach", "evict", "serializ", "verifi")


def make_body(r: Any, i: int) -> tuple[str, str]:
    """A realistic entry body and scope: mixed vocabulary, file paths, numbers."""
    w = r.choice
    mod = w(MODULES)
    path = f"src/swarm/{mod}/{w(WORDS)}.py"
    k = r.random()
    if k < 0.10:  # the common regex
        body = (
            f"timeout after {r.randint(100, 30000)}ms waiting for {w(WORDS)} {w(WORDS)} "
            f"(attempt {r.randint(1, 5)} of 5) in {path}:{r.randint(1, 900)}"
        )
    elif k < 0.30:
        body = (
            f"tests/{mod}/test_{w(WORDS)}.py::test_{w(WORDS)}_{w(WORDS)} fails: AssertionError: "
            f"expected {r.randint(0, 999)} got {r.randint(0, 999)}; {w(WORDS)} {w(WORDS)} is "
            f"stale after the {w(WORDS)} {w(VERBS)}ed"
        )
    elif k < 0.55:
        body = (
            f"{w(WORDS).capitalize()} in {path}:{r.randint(1, 900)} {w(VERBS)}es the {w(WORDS)} "
            f"before the {w(WORDS)} is {w(VERBS)}ed; {w(WORDS)} {w(WORDS)} {w(WORDS)}; see "
            f"#{r.randint(1, 900000)}"
        )
    elif k < 0.80:
        body = (
            f"patched {path}: {w(WORDS)} now {w(VERBS)}es {w(WORDS)} under the {w(WORDS)} lock; "
            f"{r.randint(1, 400)} tests pass, {r.randint(0, 9)} skipped (commit "
            f"{r.getrandbits(28):07x})"
        )
    else:
        body = (
            f"benchmark {w(WORDS)}_{w(WORDS)}: {r.randint(100, 90000)} ops/s, p99 "
            f"{r.randint(1, 900)} ms on {r.choice((2, 4, 8, 16))} cores with {w(WORDS)} "
            f"{w(WORDS)} and {w(WORDS)} {w(WORDS)}"
        )
    if r.random() < 0.01:  # the case-insensitive pattern, in mixed case
        body += " " + r.choice(("Deadlock detected", "DEADLOCK DETECTED", "deadlock detected"))
    if r.random() < 0.3:
        body += f" ({w(WORDS)} {w(WORDS)} {w(WORDS)} {w(WORDS)})"
    return body, path


# ---------------------------------------------------------------------------- appends vs ping


def append_body(n: int, i: int) -> dict[str, Any]:
    return {
        "type": "OBSERVED",
        "body": f"client {n} call {i}: timeout after {100 + i % 900}ms waiting for the cache "
        f"lock in src/swarm/hub/app.py:{i % 400}; retried {i % 5} times",
        "scope": [f"src/swarm/hub/module_{n % 32}.py"],
    }


WRK_BODY = json.dumps(
    {
        "type": "OBSERVED",
        "body": "wrk call NNN: timeout after 250ms waiting for the cache lock in "
        "src/swarm/hub/app.py:NNN; retried 2 times",
        "scope": ["src/swarm/hub/module_7.py"],
    }
)


PACE = 0.5  # seconds between one client's appends in the paced phase


def throughput(
    figures: B.Figures,
    engine: str,
    url: str,
    work: Path,
    tools: list[str],
    clients: int,
    seconds: float,
    warmup: float,
    profile: Path | None,
) -> None:
    with B.hub(url, work / f"run-{engine}") as hub:
        tokens = [t for _name, t in B.register(hub.url, hub.operator_token, clients)]
        for tool in tools:

            def load(method: str, path: str, body: Any, tool: str = tool) -> B.LoadResult:
                if tool == "httpx":
                    return B.load_httpx(
                        hub, tokens, method, path, body, warmup=warmup, duration=seconds
                    )
                return B.load_wrk(
                    hub,
                    tokens,
                    method,
                    path,
                    WRK_BODY if method == "POST" else "",
                    connections=clients,
                    warmup=warmup,
                    duration=seconds,
                    scratch=work,
                )

            figures.log(f"{engine}/{tool}: GET /v1/ping with {clients} clients for {seconds}s")
            ping = load("GET", "/v1/ping", None)
            figures.log(f"{engine}/{tool}: POST /v1/entries with {clients} clients for {seconds}s")
            spy = None
            if profile is not None and tool == tools[0]:
                assert hub.process is not None
                profile.mkdir(parents=True, exist_ok=True)
                spy = subprocess.Popen(
                    [
                        str(Path(sys.executable).parent / "py-spy"),
                        "record",
                        "-p",
                        str(hub.process.pid),
                        "-f",
                        "raw",
                        "-r",
                        "200",
                        "-d",
                        str(int(seconds + warmup)),
                        "-o",
                        str(profile / f"append-{engine}.txt"),
                        "--nonblocking",
                        "--gil",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            appends = load("POST", "/v1/entries", append_body)
            if spy is not None:
                spy.wait(timeout=60)
            tag = {"engine": engine, "load": tool}
            figures.add("ping requests/s (HTTP ceiling)", ping.rate, "req/s", **tag)
            figures.add("ping p50", ping.p50_ms, "ms", **tag)
            figures.add("ping p99", ping.p99_ms, "ms", **tag)
            figures.add("appends/s", appends.rate, "req/s", **tag)
            figures.add("append p50", appends.p50_ms, "ms", **tag)
            figures.add("append p99", appends.p99_ms, "ms", **tag)
            figures.add(
                "appends / ping ceiling",
                appends.rate / ping.rate if ping.rate else 0,
                "ratio",
                "target >= 0.5",
                **tag,
            )
            if appends.requests:
                figures.add(
                    "hub CPU per append", 1000 * appends.hub_cpu / appends.requests, "ms", **tag
                )
            if ping.requests:
                figures.add("hub CPU per ping", 1000 * ping.hub_cpu / ping.requests, "ms", **tag)
            figures.add(
                "load generator CPU (append phase)", appends.client_cpu / seconds, "cores", **tag
            )
            if appends.errors or ping.errors:
                figures.add("errors (ping + append)", appends.errors + ping.errors, "count", **tag)
        # Agents call the hub between steps, not back to back: the latency a worker sees when
        # each of the clients appends about once per PACE seconds (exponential waits).
        paced_tool = "wrk" if "wrk" in tools else "httpx"
        figures.log(f"{engine}/paced: {clients} clients, one append each per {PACE}s")
        if paced_tool == "wrk":
            paced = B.load_wrk(
                hub,
                tokens,
                "POST",
                "/v1/entries",
                WRK_BODY,
                connections=clients,
                warmup=warmup,
                duration=seconds,
                scratch=work,
                pace=PACE,
            )
        else:
            paced = B.load_httpx(
                hub,
                tokens,
                "POST",
                "/v1/entries",
                append_body,
                warmup=warmup,
                duration=seconds,
                interval=PACE,
            )
        tag = {"engine": engine, "load": f"{paced_tool} paced {PACE}s"}
        figures.add("paced appends/s", paced.rate, "req/s", **tag)
        figures.add("paced append p50", paced.p50_ms, "ms", **tag)
        figures.add("paced append p99", paced.p99_ms, "ms", "target < 100", **tag)
        if paced.errors:
            figures.add("errors (paced)", paced.errors, "count", **tag)


# ---------------------------------------------------------------------------- grep


def build_grep_db(figures: B.Figures, engine: str, url: str, n: int) -> float:
    """N entries by bulk insert into a schema made by Database.create_schema(); answers seconds.
    SQLite: executemany in 100k-row transactions, the FTS5 trigger dropped during the load and
    the index filled by FTS5 'rebuild' (the same rows, columns and tokenizer). PostgreSQL: COPY
    (the id trigger runs per row); the trigram GIN indexes are
    dropped before and rebuilt after the load (what the same rows would give on insert)."""
    from swarm.db import Database, _postgres_trigram_indexes

    db = Database(url)
    db.create_schema()
    r = B.rng(7)
    rare_at = set(r.sample(range(n), RARE_ROWS))
    authors = 64
    t0 = time.perf_counter()
    base = time.time() - n * 0.01

    def rows(lo: int, hi: int) -> list[tuple[Any, ...]]:
        out = []
        for i in range(lo, hi):
            body, path = make_body(r, i)
            if i in rare_at:
                body += f" -- {RARE} in {path}"
            typ = "FACT" if i % 7 == 0 else "OBSERVED"
            out.append((base + i * 0.01, 1 + i % authors, typ, body, path, ""))
        return out

    chunk = 100_000
    raw = db.engine.raw_connection()
    try:
        cur = raw.cursor()
        if db.is_sqlite:
            cur.execute("BEGIN")
            cur.executemany(
                "INSERT INTO workers (name, token_hash, created_at) VALUES (?, ?, ?)",
                [(f"w{k}", f"bench-{k}", base) for k in range(1, authors + 1)],
            )
            # The FTS5 trigger costs ~0.1 ms a row and grows superlinearly inside one big
            # transaction; 'rebuild' fills the same external-content index from the same
            # columns in one pass. The trigger is put back afterwards (create_schema).
            cur.execute("DROP TRIGGER entries_fts_insert")
            cur.execute("COMMIT")
            for lo in range(0, n, chunk):
                batch = rows(lo, min(n, lo + chunk))
                cur.execute("BEGIN")
                cur.executemany(
                    "INSERT INTO entries (created_at, author_id, type, body, scope, refs) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    batch,
                )
                cur.execute("COMMIT")
                figures.log(f"{engine}: {min(n, lo + chunk)} entries")
            cur.execute("BEGIN")
            cur.execute("INSERT INTO entries_fts(entries_fts) VALUES ('rebuild')")
            cur.execute("COMMIT")
            cur.execute("ANALYZE")
        else:
            cur.executemany(
                "INSERT INTO workers (name, token_hash, created_at) VALUES (%s, %s, %s)",
                [(f"w{k}", f"bench-{k}", base) for k in range(1, authors + 1)],
            )
            cur.execute("DROP INDEX entries_body_trgm")
            cur.execute("DROP INDEX entries_scope_trgm")
            raw.commit()
            for lo in range(0, n, chunk):
                batch = rows(lo, min(n, lo + chunk))
                with cur.copy(
                    "COPY entries (created_at, author_id, type, body, scope, refs) FROM STDIN"
                ) as copy:
                    for row in batch:
                        copy.write_row(row)
                raw.commit()
                figures.log(f"{engine}: {min(n, lo + chunk)} entries")
            cur.execute("SET maintenance_work_mem = '256MB'")
            cur.execute(
                "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                "ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
            )
            schema = cur.fetchone()[0]
            for statement in _postgres_trigram_indexes(schema):
                cur.execute(statement)
            raw.commit()
            raw.driver_connection.autocommit = True
            cur.execute("VACUUM ANALYZE entries")
            raw.driver_connection.autocommit = False
    finally:
        raw.close()
    db.create_schema()  # puts the SQLite FTS trigger back; a no-op otherwise
    db.dispose()
    return time.perf_counter() - t0


def full_scan(db: Any, regex: Any) -> tuple[float, int]:
    """Every row streamed (raw driver cursor, newest first) and checked by RE2: seconds, hits."""
    t0 = time.perf_counter()
    hits = 0
    raw = db.engine.raw_connection()
    try:
        if db.is_sqlite:
            cur = raw.cursor()
            cur.execute("SELECT body, scope FROM entries ORDER BY id DESC")
        else:
            cur = raw.driver_connection.cursor(name="bench_scan")
            cur.itersize = 20_000
            cur.execute("SELECT body, scope FROM entries ORDER BY id DESC")
        search = regex.search
        while True:
            batch = cur.fetchmany(20_000)
            if not batch:
                break
            for body, scope in batch:
                if search(f"{body}\n{scope}" if scope else body) is not None:
                    hits += 1
        cur.close()
    finally:
        raw.close()
    return time.perf_counter() - t0, hits


def timed(fn: Any, reps: int) -> tuple[float, Any]:
    times = []
    got = None
    for _ in range(reps):
        t0 = time.perf_counter()
        got = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return B.percentile(times, 50), got


def grep_bench(
    figures: B.Figures, engine: str, url: str, n: int, reps: int, scan_reps: int, work: Path
) -> None:
    import httpx

    from swarm.context.grep import compile_pattern
    from swarm.context.store import ContextStore
    from swarm.db import Database

    figures.log(f"{engine}: building {n} entries")
    seconds = build_grep_db(figures, engine, url, n)
    tag = {"engine": engine, "load": "-"}
    figures.add(f"bulk load of {n} entries (+ indexes)", seconds, "s", **tag)
    db = Database(url)
    store = ContextStore(db)
    with B.hub(url, work / f"grep-run-{engine}") as hub:
        headers = {"Authorization": f"Bearer {hub.operator_token}"}
        with httpx.Client(base_url=hub.url, headers=headers, timeout=120) as http:
            for name, pattern, ignore_case in PATTERNS:
                figures.log(f"{engine}: grep {name}")

                def grep(pattern: str = pattern, ic: bool = ignore_case) -> Any:
                    return store.grep(pattern, ignore_case=ic, limit=20)

                def noindex(pattern: str = pattern, ic: bool = ignore_case) -> Any:
                    return store.grep(pattern, ignore_case=ic, limit=20, use_index=False)

                grep()  # warm the caches
                p50, found = timed(grep, reps)
                params = {"pattern": pattern, "ignore_case": str(ignore_case).lower(), "limit": 20}
                http.get("/v1/grep", params=params).raise_for_status()
                p50_http, _ = timed(lambda p=params: http.get("/v1/grep", params=p), reps)
                p50_noindex, _ = timed(noindex, scan_reps)
                regex = compile_pattern(pattern, ignore_case=ignore_case).regex
                scan_ms, (_s, hits) = timed(lambda r=regex: full_scan(db, r), scan_reps)
                t = {**tag, "pattern": name}
                note = f"{len(found.entries)} shown, {found.scanned} rows checked"
                figures.add("grep p50 (store)", p50, "ms", note, **t)
                figures.add("grep p50 (GET /v1/grep)", p50_http, "ms", **t)
                figures.add("grep p50, index disabled", p50_noindex, "ms", "limit 20", **t)
                figures.add("full scan (stream + RE2)", scan_ms, "ms", f"{hits} rows match", **t)
                ratio = scan_ms / p50 if p50 else 0
                figures.add("full scan / grep", ratio, "x", "target >= 20", **t)
    db.dispose()


def main() -> None:
    p = B.parser(__doc__)
    p.add_argument("--load", choices=("httpx", "wrk", "both"), default="both")
    p.add_argument("--clients", type=int, default=None, help="Default 256 (--quick: 64).")
    p.add_argument("--seconds", type=float, default=None, help="Measured seconds per load phase.")
    p.add_argument("--entries", type=int, default=None, help="Entries for grep (1,000,000).")
    p.add_argument("--no-grep", action="store_true")
    p.add_argument("--no-load", action="store_true")
    p.add_argument("--profile", type=Path, default=None, help="py-spy raw profiles of appends.")
    args = p.parse_args()
    quick = args.quick
    seconds = args.seconds or (2.0 if quick else 10.0)
    warmup = 1.0 if quick else 2.0
    n = args.entries or (10_000 if quick else 1_000_000)
    clients = args.clients or (64 if quick else 256)
    tools = ["httpx", "wrk"] if args.load == "both" else [args.load]
    if "wrk" in tools and not B.have_wrk():
        tools.remove("wrk")
        B.Figures(False).log("wrk is not installed (apt-get install wrk): httpx only")
    if quick:
        tools = tools[-1:]  # one load generator: wrk when present
    figures = B.Figures(args.json)
    figures.log(f"machine: {B.machine()}")
    with B.workdir("swarm-bench-context-") as work:
        for engine in B.engines(args.engine):
            if not args.no_load:
                with B.database_url(engine, work) as url:
                    throughput(
                        figures,
                        engine,
                        url,
                        work,
                        tools,
                        clients,
                        seconds,
                        warmup,
                        args.profile,
                    )
            if not args.no_grep:
                with B.database_url(engine, work, "grep") as url:
                    grep_bench(figures, engine, url, n, 3 if quick else 11, 1 if quick else 3, work)
    figures.table()


if __name__ == "__main__":
    main()
