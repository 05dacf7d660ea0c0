"""The hub's log lines that matter (warnings and errors) kept in its database too.

The hub's log file lives in the run directory; when that disk filled up, the lines saying why
(the disk is full, a merge failed, a worker died) were the ones lost. So every record at
WARNING or above also goes to the `hub_log` table. The database may be on the same full disk:
records it cannot take yet wait in memory (the newest BACKLOG) and go in once it takes writes
again, with a line saying how many were dropped meanwhile. `swarm run` forwards the hub's
stderr outside the run directory as well (swarm.worker.logpipe).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from sqlalchemy import Column, Float, Index, Integer, String, Table, Text, insert

from swarm.db import Database, metadata

BACKLOG = 2000
RETRY_SECONDS = 2.0
MESSAGE_LIMIT = 4000

hub_log = Table(
    "hub_log",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created_at", Float, nullable=False),
    Column("level", String(16), nullable=False),
    Column("source", String(100), nullable=False),  # the logger's name
    # What the line is about, for queries: "disk_full", "disk_back", or "" (any other line).
    Column("kind", String(32), nullable=False, server_default=""),
    Column("message", Text, nullable=False),
    Index("hub_log_by_kind", "kind", "id"),
)


def one_line(record: logging.LogRecord) -> str:
    """The record's message, with its exception as `Type: message` (no traceback)."""
    text = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        text += f" ({type(exc).__name__}: {exc})"
    return text.replace("\x00", "\\x00")[:MESSAGE_LIMIT]


class DatabaseLog(logging.Handler):
    """A logging handler writing to `hub_log` from a thread of its own, never blocking the
    caller and never logging about itself (a failure would log again, for ever)."""

    def __init__(self, db: Database, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self.db = db
        self._pending: deque[dict[str, Any]] = deque(maxlen=BACKLOG)
        self._dropped = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="hub-log", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        row = {
            "created_at": record.created,
            "level": record.levelname[:16],
            "source": record.name[:100],
            "kind": str(getattr(record, "kind", ""))[:32],
            "message": one_line(record),
        }
        with self._lock:
            if len(self._pending) == self._pending.maxlen:
                self._dropped += 1
            self._pending.append(row)
        self._wake.set()

    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(RETRY_SECONDS)
            self._wake.clear()
            if not self.write_waiting():
                time.sleep(RETRY_SECONDS)  # the database does not take writes: later

    def flush(self) -> None:
        self.write_waiting()

    def write_waiting(self) -> bool:
        """Write what waits; False when the database refused (it stays waiting)."""
        with self._lock:
            rows = list(self._pending)
            self._pending.clear()
            dropped, self._dropped = self._dropped, 0
        if not rows:
            return True
        batch = [_dropped_row(dropped, rows[0]["created_at"]), *rows] if dropped else rows
        try:
            with self.db.write() as conn:
                conn.execute(insert(hub_log), batch)
        except Exception:
            with self._lock:  # back in front of what came meanwhile, as room allows
                room = BACKLOG - len(self._pending)
                keep = rows[-room:] if room > 0 else []
                self._dropped += dropped + len(rows) - len(keep)
                self._pending.extendleft(reversed(keep))
            return False
        return True

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=5)
        self.flush()
        super().close()


def _dropped_row(count: int, when: float) -> dict[str, Any]:
    return {
        "created_at": when,
        "level": "WARNING",
        "source": "swarm.hub.log",
        "kind": "",
        "message": f"{count} earlier log lines were dropped while the database took no writes",
    }


# uvicorn's loggers do not propagate to the root logger: each gets the handler itself.
LOGGERS = ("", "uvicorn", "uvicorn.error")


class Installed:
    """The handler on the hub's loggers while the app runs (added at start-up, removed at
    shutdown, so several hubs of one test process do not pile up handlers)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.handler: DatabaseLog | None = None

    def start(self) -> None:
        self.handler = DatabaseLog(self.db)
        for name in LOGGERS:
            logging.getLogger(name).addHandler(self.handler)

    def stop(self) -> None:
        if self.handler is None:
            return
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(self.handler)
        self.handler.close()
        self.handler = None
