"""Cheap server-side request timing: a log-scale histogram per route, written on shutdown.

A pure ASGI middleware (no BaseHTTPMiddleware: that one costs a task and a queue per request).
Each request adds one perf_counter pair and one dict update under a lock; on shutdown the hub
logs a one-line summary per route group and writes `<run dir>/hub-timing.json`, which
`scripts/scale_sim.py` reads for the hub's p99 latency.

Enabled in `swarm.hub.app.create_app` by `install_timing(app, runtime)`.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("swarm.hub.timing")

# Buckets: 2**(k/4) microseconds, k = 0 … 119 (1 µs … ~1 h); about 19% wide each.
STEPS_PER_OCTAVE = 4
BUCKETS = 120
TIMING_FILE = "hub-timing.json"
_NUMBER = re.compile(r"/\d+(?=/|$)")


def _bucket(seconds: float) -> int:
    micros = max(1.0, seconds * 1e6)
    return min(BUCKETS - 1, int(math.log2(micros) * STEPS_PER_OCTAVE))


def _upper(bucket: int) -> float:
    """The upper edge of a bucket, in seconds (percentiles are reported as that edge)."""
    return float(2 ** ((bucket + 1) / STEPS_PER_OCTAVE) / 1e6)


def route_group(method: str, path: str) -> str:
    """`POST /v1/prs/{n}/merge`; git's smart HTTP is one group per service."""
    if path.startswith("/git/"):
        tail = path.rsplit("/", 1)[-1]
        return f"{method} git {tail}"
    return f"{method} {_NUMBER.sub('/{n}', path)}"


class Histogram:
    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.total = 0
        self.sum = 0.0
        self.max = 0.0

    def add(self, seconds: float) -> None:
        self.counts[_bucket(seconds)] += 1
        self.total += 1
        self.sum += seconds
        self.max = max(self.max, seconds)

    def merge(self, other: Histogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total
        self.sum += other.sum
        self.max = max(self.max, other.max)

    def quantile(self, q: float) -> float:
        if not self.total:
            return 0.0
        rank = q * self.total
        seen = 0
        for bucket, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return min(_upper(bucket), self.max)
        return self.max

    def summary(self) -> dict[str, Any]:
        return {
            "count": self.total,
            "mean": self.sum / self.total if self.total else 0.0,
            "p50": self.quantile(0.5),
            "p90": self.quantile(0.9),
            "p99": self.quantile(0.99),
            "max": self.max,
        }


class Timings:
    """Per-route histograms, shared by the middleware and the shutdown hook."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.routes: dict[str, Histogram] = {}

    def add(self, group: str, seconds: float) -> None:
        with self.lock:
            hist = self.routes.get(group)
            if hist is None:
                hist = self.routes[group] = Histogram()
            hist.add(seconds)

    def report(self) -> dict[str, Any]:
        with self.lock:
            overall = Histogram()
            api = Histogram()
            for group, hist in self.routes.items():
                overall.merge(hist)
                if " git " not in group:
                    api.merge(hist)
            return {
                "all": overall.summary(),
                "api": api.summary(),  # without git's smart HTTP (clones/fetches/pushes)
                "routes": {g: h.summary() for g, h in sorted(self.routes.items())},
            }


class TimingMiddleware:
    """Times each HTTP request from its arrival to the end of its response body."""

    def __init__(self, app: ASGIApp, timings: Timings) -> None:
        self.app = app
        self.timings = timings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            self.timings.add(
                route_group(scope.get("method", "?"), scope.get("path", "")),
                time.perf_counter() - started,
            )


def write_report(timings: Timings, run_dir: Path | None) -> dict[str, Any]:
    report = timings.report()
    for group, s in report["routes"].items():
        log.info(
            "%-40s n=%-7d p50=%.1fms p99=%.1fms max=%.1fms",
            group,
            s["count"],
            s["p50"] * 1e3,
            s["p99"] * 1e3,
            s["max"] * 1e3,
        )
    a = report["all"]
    log.warning(
        "hub latency: %d requests, p50 %.1f ms, p99 %.1f ms, max %.1f ms",
        a["count"],
        a["p50"] * 1e3,
        a["p99"] * 1e3,
        a["max"] * 1e3,
    )
    if run_dir is not None and run_dir.is_dir():
        try:
            (run_dir / TIMING_FILE).write_text(json.dumps(report, indent=1) + "\n")
        except OSError as exc:  # a full disk: the figures above are in the log
            log.warning("could not write %s: %s", run_dir / TIMING_FILE, exc)
    return report


def install_timing(app: Any, runtime: Any = None) -> Timings:
    """Add the middleware to a FastAPI app and write the report when the app shuts down."""
    timings = Timings()
    app.add_middleware(TimingMiddleware, timings=timings)
    app.state.timings = timings
    run_dir = getattr(getattr(runtime, "settings", None), "run_dir", None)

    async def _report() -> None:
        write_report(timings, Path(run_dir) if run_dir is not None else None)

    app.router.on_shutdown.append(_report)

    return timings
