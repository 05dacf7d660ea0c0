"""The hub and a full disk: new work refused while the disk is nearly full, a write that failed
for lack of space answered 507 and remembered, and recovery by itself when space returns.

A full disk mid-run failed sessions one after another, left their claims open, and a ref update
under ENOSPC corrupted the repository. So while the free space under the run directory is below
SWARM_MIN_FREE_MB (default 200), the hub answers 507 to what starts new work: a session or a
pull request. Everything that winds work down (releases, FAILs, summaries, merges,
heartbeats) still goes through, as long as the disk takes it. A write that fails because the
disk is full to the last byte (SQLite's "database or disk is full", git's ENOSPC) is answered
507 with a message saying so, never a bare 500; `DiskWatch` remembers the episode (the
summary shows it, the liveness sweep does not count the heartbeats it lost against workers)
and logs it once. Clients retry a 5xx, so workers wait until space returns.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("swarm.hub.disk")

CHECK_EVERY = 1.0  # seconds a free-space reading is reused
# An episode ends once a write went through and none failed for lack of space this long.
QUIET_SECONDS = 2.0
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _new_work(method: str, path: str) -> bool:
    # Pushes go through: a session in flight would fail on a refused push (a worker's work is
    # a few kilobytes); its PR then waits, retrying, for the space to return.
    return method == "POST" and path in ("/v1/sessions", "/v1/prs")


class DiskWatch:
    """What the hub knows of its disk: whether writes fail for lack of space, since when, how
    often; thread-safe (request threads, the upkeep thread and the event loop all report)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self._lock = threading.Lock()
        self.full_since: float | None = None
        self.last_failure = 0.0  # clock() of the last write that failed for lack of space
        self.episodes = 0
        self.full_seconds = 0.0  # of the episodes that ended
        self.refused = 0  # writes that failed for lack of space, in all
        self.last_error = ""

    @property
    def full(self) -> bool:
        return self.full_since is not None

    def failed(self, what: str) -> None:
        """A write failed because the disk is full."""
        with self._lock:
            now = self.clock()
            self.last_failure = now
            self.refused += 1
            self.last_error = what[:500]
            if self.full_since is not None:
                return
            self.full_since = now
            self.episodes += 1
        log.error(
            "the disk under %s is full: %s; writes are answered 507 (retried by the clients) "
            "until space returns",
            self.path, what[:300], extra={"kind": "disk_full"},
        )  # fmt: skip

    def wrote(self) -> None:
        """A write went through: the episode ends once none failed for a moment."""
        if self.full_since is None:
            return
        with self._lock:
            now = self.clock()
            since = self.full_since
            if since is None or now - self.last_failure < QUIET_SECONDS:
                return
            self.full_since = None
            self.full_seconds += now - since
            refused = self.refused
        log.warning(
            "the disk under %s takes writes again after %.1fs full (%d writes refused so far)",
            self.path, now - since, refused, extra={"kind": "disk_back"},
        )  # fmt: skip

    def quiet_since(self) -> float:
        """clock() since which no write failed for lack of space (0: never failed)."""
        return self.last_failure

    def status(self) -> dict[str, Any]:
        try:
            free_mb = shutil.disk_usage(self.path).free // 2**20
        except OSError:
            free_mb = -1
        with self._lock:
            now = self.clock()
            ongoing = now - self.full_since if self.full_since is not None else 0.0
            return {
                "full": self.full_since is not None,
                "free_mb": free_mb,
                "episodes": self.episodes,
                "full_seconds": round(self.full_seconds + ongoing, 1),
                "refused": self.refused,
                "last_error": self.last_error,
            }


def _refusal(message: str) -> tuple[list[tuple[bytes, bytes]], bytes]:
    body = json.dumps({"error": message, "kind": "InsufficientStorage"}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"5"),
    ]
    return headers, body


def full_message(path: Path) -> str:
    return (
        f"the hub's disk is full (under {path}): this write could not be stored and nothing was "
        "changed. It goes through once space is freed; sw and the workers retry by themselves."
    )


class DiskGuard:
    def __init__(
        self, app: Any, path: Path, min_free_bytes: int, watch: DiskWatch | None = None
    ) -> None:
        self.app = app
        self.path = path
        self.min_free = min_free_bytes
        self.watch = watch
        self._checked = 0.0
        self._free = min_free_bytes

    def free_bytes(self) -> int:
        now = time.monotonic()
        if now - self._checked > CHECK_EVERY:
            self._checked = now
            try:
                self._free = shutil.disk_usage(self.path).free
            except OSError:
                self._free = self.min_free  # cannot tell: do not refuse on a guess
        return self._free

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        if (
            self.min_free > 0
            and _new_work(method, scope["path"])
            and (free := self.free_bytes()) < self.min_free
        ):
            message = (
                f"the hub's disk is nearly full ({free // 2**20} MB free under {self.path}, "
                f"less than SWARM_MIN_FREE_MB={self.min_free // 2**20}): no new sessions or pull "
                "requests until space is freed. Finish or release what you hold; "
                "retry later (sw and the workers retry by themselves)."
            )
            headers, body = _refusal(message)
            await send({"type": "http.response.start", "status": 507, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        watch = self.watch
        if watch is None or method not in WRITES or not watch.full:
            await self.app(scope, receive, send)
            return

        async def noting(message: Any) -> None:
            if message["type"] == "http.response.start" and message["status"] < 500:
                watch.wrote()
            await send(message)

        await self.app(scope, receive, noting)


def min_free_bytes() -> int:
    return int(float(os.environ.get("SWARM_MIN_FREE_MB", "200")) * 2**20)


def install(app: Any, run_dir: Path, watch: DiskWatch) -> None:
    app.add_middleware(DiskGuard, path=run_dir, min_free_bytes=min_free_bytes(), watch=watch)
