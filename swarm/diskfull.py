"""Telling a full disk from other failures, wherever it surfaces.

A disk filled to the last byte shows up as an OSError (ENOSPC, EDQUOT) from Python and libgit2,
as SQLite's SQLITE_FULL ("database or disk is full"), as PostgreSQL's disk_full (53100), or as a
line of git's output. Each of them means the same to the run: nothing was written, and the same
write will succeed once space returns.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

# How the detail of a session that a full disk failed starts (the worker runtime writes it, the
# run's summary counts it): such a failure passes once space returns.
SESSION_PREFIX = "disk full: "
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
SQLITE_FULL = 13
POSTGRES_DISK_FULL = "53100"
MARKERS = (
    "no space left on device",  # ENOSPC's strerror: Python, libgit2, most of git
    "out of diskspace",  # git's lock files ("index.lock' write error. Out of diskspace")
    "database or disk is full",  # SQLite
    "disk quota exceeded",
    "could not extend file",  # PostgreSQL
)


def text_says_full(text: str) -> bool:
    """Output (git's, a log line) that reports a full disk."""
    lowered = text.lower()
    return any(marker in lowered for marker in MARKERS)


# Less than this free under a path whose write failed: the disk is the cause, whatever the
# error said (libgit2 has failed a blob write on ENOSPC with "no error").
NO_ROOM_BYTES = 2**20


def is_disk_full(exc: BaseException, where: Path | None = None) -> bool:
    """The error, or one it was raised from, is a full disk; with `where` (the path written
    to), also any error while the disk under it has next to no space left."""
    if where is not None:
        try:
            if shutil.disk_usage(where).free < NO_ROOM_BYTES:
                return True
        except OSError:
            pass
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in FULL_ERRNOS:
            return True
        if getattr(current, "sqlite_errorcode", None) == SQLITE_FULL:
            return True
        if getattr(current, "sqlstate", None) == POSTGRES_DISK_FULL:
            return True
        if text_says_full(str(current)):
            return True
        # SQLAlchemy keeps the driver's error as `orig`.
        todo += [getattr(current, "orig", None), current.__cause__, current.__context__]
    return False
