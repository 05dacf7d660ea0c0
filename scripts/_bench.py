"""Shared helpers of the benchmark scripts: arguments, figures (table or JSON lines),
percentiles, a hub on a given database, fresh PostgreSQL schemas, load generation.

Conventions of every `scripts/bench_*.py`:
  * a readable table on stdout; with `--json`, one JSON object per figure and line:
    {"figure": ..., "value": ..., "unit": ..., ...extra keys such as "engine"};
  * `--quick`: a reduced run that ends within a minute;
  * bounded loops, loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from swarm.hub.server import HubProcess  # noqa: E402

POSTGRES_URL = os.environ.get(
    "SWARM_BENCH_POSTGRES_URL",
    os.environ.get("SWARM_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
)
ENGINES = ("sqlite", "postgres")


# ---------------------------------------------------------------------------- arguments, figures


def parser(doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="A reduced run that ends within a minute.")
    p.add_argument("--json", action="store_true", help="One JSON object per figure and line.")
    p.add_argument(
        "--engine",
        choices=(*ENGINES, "both"),
        default="both",
        help="Database engine(s) to measure.",
    )
    return p


def engines(choice: str) -> tuple[str, ...]:
    return ENGINES if choice == "both" else (choice,)


@dataclass
class Figures:
    """Figures as they are measured: a table at the end, or one JSON line each at once."""

    as_json: bool
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, figure: str, value: float, unit: str, note: str = "", **extra: Any) -> None:
        row = {"figure": figure, "value": round(float(value), 3), "unit": unit, **extra}
        if note:
            row["note"] = note
        self.rows.append(row)
        if self.as_json:
            print(json.dumps(row), flush=True)

    def log(self, message: str) -> None:
        """Progress on stderr (stdout stays a table or JSON lines)."""
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def table(self) -> None:
        if self.as_json:
            return
        extras = sorted({k for r in self.rows for k in r} - {"figure", "value", "unit", "note"})
        head = (
            f"{'figure':44} "
            + "".join(f"{k:10} " for k in extras)
            + f"{'value':>11}  {'unit':9} note"
        )
        print(head)
        print("-" * len(head))
        for r in self.rows:
            cells = "".join(f"{r.get(k, '')!s:10} " for k in extras)
            print(f"{r['figure']:44} {cells}{r['value']:11.2f}  {r['unit']:9} {r.get('note', '')}")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}, {platform.system()}"


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (0..100) by linear interpolation; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


# ---------------------------------------------------------------------------- databases, hubs


@contextlib.contextmanager
def postgres_schema(admin_url: str = POSTGRES_URL) -> Iterator[str]:
    """A URL whose search_path is a fresh schema (dropped afterwards), as tests/conftest.py."""
    from sqlalchemy import create_engine, text

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        # pg_trgm in `public`: else create_schema() would install it in this schema (first on
        # the search_path) and dropping the schema would drop it, with every other schema's
        # trigram indexes (DROP ... CASCADE).
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public"))
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in admin_url else "?"
    try:
        yield f"{admin_url}{sep}options=-csearch_path%3D{schema},public"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@contextlib.contextmanager
def database_url(engine: str, workdir: Path, name: str = "hub") -> Iterator[str]:
    if engine == "sqlite":
        yield f"sqlite:///{workdir / (name + '.db')}"
    else:
        with postgres_schema() as url:
            yield url


@contextlib.contextmanager
def workdir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def hub(url: str, run_dir: Path, **env: str) -> Iterator[HubProcess]:
    """`swarm hub` as its own process on loopback, on the given database URL."""
    from swarm.db import Database

    database = Database(url)
    database.create_schema()
    database.dispose()
    process = HubProcess(run_dir, database_url=url, env=env)
    with process:
        yield process


def register(hub_url: str, operator_token: str, n: int) -> list[tuple[str, str]]:
    """Register `n` workers (POST /v1/workers with the operator token): their (name, token)."""

    async def run() -> list[tuple[str, str]]:
        limits = httpx.Limits(max_connections=16)
        headers = {"Authorization": f"Bearer {operator_token}"}
        async with httpx.AsyncClient(
            base_url=hub_url, headers=headers, limits=limits, timeout=60
        ) as c:
            sem = asyncio.Semaphore(16)

            async def one() -> tuple[str, str]:
                async with sem:
                    r = await c.post("/v1/workers", json={"model": "bench"})
                    r.raise_for_status()
                    got = r.json()["result"]
                    return got["name"], got["token"]

            return list(await asyncio.gather(*(one() for _ in range(n))))

    return asyncio.run(run())


def pids_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------- load generation


@dataclass
class LoadResult:
    tool: str
    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]  # for httpx: every request; for wrk: empty (see p50/p99)
    p50_ms: float
    p99_ms: float
    hub_cpu: float = 0.0  # CPU seconds the hub used during the measured window
    client_cpu: float = 0.0  # CPU seconds the load generator used

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


async def _closed_loop_httpx(
    hub_url: str,
    tokens: list[str],
    method: str,
    path: str,
    body: Any,
    warmup: float,
    duration: float,
    interval: float = 0.0,
) -> tuple[int, int, float, list[float]]:
    """One AsyncClient per token; each client sends its next request when the last one answers.
    The clients are made before the clock starts (they share one SSL context: making one per
    client costs ~0.1 s of CPU each). Only requests that start and end inside the measured
    window count."""
    import ssl

    shared_ssl = ssl.create_default_context()
    latencies: list[float] = []
    errors = 0
    clients = [
        httpx.AsyncClient(
            base_url=hub_url,
            headers={"Authorization": f"Bearer {token}"},
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            timeout=60,
            verify=shared_ssl,
        )
        for token in tokens
    ]
    begin = time.perf_counter()
    start_at = begin + warmup
    stop_at = start_at + duration

    async def client(c: httpx.AsyncClient, n: int) -> None:
        nonlocal errors
        i = 0
        next_at = 0.0
        if interval:  # paced clients start spread over one interval, like agents would
            await asyncio.sleep(interval * n / max(1, len(clients)))
        while True:
            if interval and i:
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            t0 = time.perf_counter()
            next_at = t0 + interval
            if t0 >= stop_at:
                return
            payload = body(n, i) if callable(body) else body
            try:
                if method == "GET":
                    r = await c.get(path)
                else:
                    r = await c.post(path, json=payload)
                ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            t1 = time.perf_counter()
            if t0 >= start_at and t1 <= stop_at:
                if ok:
                    latencies.append((t1 - t0) * 1000)
                else:
                    errors += 1
            i += 1

    try:
        await asyncio.gather(*(client(c, n) for n, c in enumerate(clients)))
    finally:
        for c in clients:
            await c.aclose()
    return len(latencies), errors, duration, latencies


def load_httpx(
    hub: HubProcess,
    tokens: list[str],
    method: str,
    path: str,
    body: Any = None,
    *,
    warmup: float = 2.0,
    duration: float = 10.0,
    interval: float = 0.0,
) -> LoadResult:
    """Load from this process (Python asyncio + httpx, uvloop if present): closed loop, or with
    `interval`, each client calling once per interval (an agent's pace)."""
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    assert hub.process is not None
    hub_pid = hub.process.pid
    cpu0 = (pids_cpu(hub_pid), time.process_time())

    async def go() -> tuple[int, int, float, list[float]]:
        return await _closed_loop_httpx(
            hub.url, tokens, method, path, body, warmup, duration, interval
        )

    # CPU over the whole call (warm-up included), scaled to the measured window.
    t0 = time.perf_counter()
    requests, errors, seconds, lat = runner(go())
    wall = time.perf_counter() - t0
    scale = seconds / wall if wall else 1.0
    hub_cpu = (pids_cpu(hub_pid) - cpu0[0]) * scale
    client_cpu = (time.process_time() - cpu0[1]) * scale
    return LoadResult(
        "httpx",
        requests,
        errors,
        seconds,
        lat,
        percentile(lat, 50),
        percentile(lat, 99),
        hub_cpu,
        client_cpu,
    )


WRK_LUA = r"""
-- swarm benchmark: rotate worker tokens over requests; print a JSON summary at the end.
local tokens = {}
for line in io.lines(os.getenv("SWARM_BENCH_TOKENS")) do tokens[#tokens + 1] = line end
local method = os.getenv("SWARM_BENCH_METHOD")
local path = os.getenv("SWARM_BENCH_PATH")
local body = os.getenv("SWARM_BENCH_BODY")
local pace_ms = tonumber(os.getenv("SWARM_BENCH_PACE_MS") or "0")
local counter = 0
function setup(thread) thread:set("offset", counter * 7919); counter = counter + 1 end
function init(args) n = offset or 0; math.randomseed(os.time() + n) end
if pace_ms > 0 then
  -- Paced clients: after each answer a connection waits an exponential time with mean
  -- pace_ms (independent arrivals, as from agents that think between calls). wrk starts the
  -- latency clock when the request is sent, after the wait.
  function delay() return math.floor(-pace_ms * math.log(1 - math.random())) end
end
function request()
  n = n + 1
  local headers = {}
  headers["Authorization"] = "Bearer " .. tokens[(n % #tokens) + 1]
  if method == "POST" then
    headers["Content-Type"] = "application/json"
    local b = string.gsub(body, "NNN", tostring(n))
    return wrk.format("POST", path, headers, b)
  end
  return wrk.format("GET", path, headers)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'SWARM_JSON {"requests": %d, "seconds": %f, "p50_us": %d, "p99_us": %d, '
    .. '"errors": %d, "status": %d}\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
"""


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def load_wrk(
    hub: HubProcess,
    tokens: list[str],
    method: str,
    path: str,
    body: str = "",
    *,
    connections: int = 256,
    threads: int = 2,
    warmup: float = 2.0,
    duration: float = 10.0,
    scratch: Path,
    pace: float = 0.0,
) -> LoadResult:
    """Load with wrk (C, epoll): `connections` keep-alive connections, tokens rotated per
    request; closed loop, or with `pace`, each connection waiting an exponential time of mean
    `pace` seconds after each answer. `NNN` in the body becomes a request counter. A short
    warm-up run first."""
    tokens_file = scratch / "tokens.txt"
    tokens_file.write_text("\n".join(tokens) + "\n")
    script = scratch / "bench.lua"
    script.write_text(WRK_LUA)
    env = {
        **os.environ,
        "SWARM_BENCH_TOKENS": str(tokens_file),
        "SWARM_BENCH_METHOD": method,
        "SWARM_BENCH_PATH": path,
        "SWARM_BENCH_BODY": body,
        "SWARM_BENCH_PACE_MS": str(round(pace * 1000)),
    }

    def run(seconds: float) -> tuple[dict[str, Any], float, float]:
        assert hub.process is not None
        cmd = [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "30s",
            "-s",
            str(script),
            hub.url + path,
        ]
        cpu_hub = pids_cpu(hub.process.pid)
        started = time.perf_counter()
        usage0 = os.times()
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=seconds + 120)
        usage1 = os.times()
        wall = time.perf_counter() - started
        hub_cpu = pids_cpu(hub.process.pid) - cpu_hub
        client_cpu = (usage1.children_user + usage1.children_system) - (
            usage0.children_user + usage0.children_system
        )
        for line in out.stdout.splitlines():
            if line.startswith("SWARM_JSON "):
                scale = seconds / wall if wall else 1.0
                return json.loads(line[len("SWARM_JSON ") :]), hub_cpu * scale, client_cpu * scale
        raise RuntimeError(f"wrk gave no summary:\n{out.stdout}\n{out.stderr}")

    if warmup > 0:
        run(warmup)
        drain(hub)
    got, hub_cpu, client_cpu = run(duration)
    drain(hub)
    return LoadResult(
        "wrk",
        got["requests"],
        got["errors"] + got["status"],
        got["seconds"],
        [],
        got["p50_us"] / 1000,
        got["p99_us"] / 1000,
        hub_cpu,
        client_cpu,
    )


def drain(hub: HubProcess, limit: float = 30.0) -> None:
    """Wait until the hub has worked off the requests a stopped load generator left queued
    (wrk closes its sockets at the end, the hub still runs what it accepted): until /health
    answers within 50 ms, or `limit` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        t0 = time.perf_counter()
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(hub.url + "/health", timeout=limit)
        if time.perf_counter() - t0 < 0.05:
            return
        time.sleep(0.2)


def rng(seed: int = 1234) -> random.Random:
    return random.Random(seed)
