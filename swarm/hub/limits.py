"""Per-worker rate limits on the hub's expensive calls (grep, feed, git, oracle): one token
bucket per worker and kind, so one worker flooding a call cannot starve its peers.

A bucket holds `burst` calls and refills at `per_minute / 60` a second. The buckets live in the
hub process: behind several replicas each keeps its own, so a worker's ceiling is per replica.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import Depends, Request

from swarm.config import Settings
from swarm.errors import RateLimited
from swarm.hub.deps import Reader
from swarm.registry import Worker

KINDS = ("grep", "feed", "git", "oracle")


class TokenBuckets:
    """Token buckets by key; `take(key)` answers 0 if a call may go, else seconds to wait."""

    def __init__(
        self, per_minute: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.clock = clock
        self._buckets: dict[Any, tuple[float, float]] = {}  # key -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, key: Any) -> float:
        if self.rate <= 0:
            return 0.0  # no limit
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate


class RateLimits:
    """The hub's buckets, one set per kind of expensive call, from the settings."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        per_minute = {
            "grep": settings.rate_grep_per_minute,
            "feed": settings.rate_feed_per_minute,
            "git": settings.rate_git_per_minute,
            "oracle": settings.rate_oracle_per_minute,
        }
        self.per_minute = per_minute
        self.buckets = {
            k: TokenBuckets(v, settings.rate_burst, clock) for k, v in per_minute.items()
        }

    def wait(self, kind: str, worker: Worker) -> float:
        return self.buckets[kind].take(worker.id)

    def check(self, kind: str, worker: Worker) -> None:
        wait = self.wait(kind, worker)
        if wait > 0:
            raise RateLimited(
                f"too many {kind} calls from {worker.name}: at most "
                f"{self.per_minute[kind]:g} a minute (SWARM_RATE_{kind.upper()}_PER_MINUTE); "
                f"try again in {math.ceil(wait)} s, and use what you already have meanwhile",
                retry_after=wait,
            )


def limited(kind: str) -> Any:
    """A route dependency: the calling worker's bucket for `kind` (the operator is not limited)."""

    async def check(request: Request, reader: Reader) -> None:
        if reader is not None:
            limits: RateLimits = request.app.state.rate_limits
            limits.check(kind, reader)

    return Depends(check)
