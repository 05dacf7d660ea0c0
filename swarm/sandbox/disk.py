"""A box's disk quota: its checkout's size on disk, watched from outside the box.

No backend bounds a bind-mounted checkout by itself (the file-size limit stops one large file,
not many), so one thread per process watches every open box: each file system's free space
every `POLL` seconds (one `statvfs`), and the size of each checkout on it when the free space
has fallen by a step since the last scan, or every `SCAN_EVERY` seconds. The fall is counted
poll by poll and only downwards, so space that other programs free meanwhile does not hide a
box's writing. The step is `SCAN_STEP`, or less when a box is close to its quota: half the room
the closest box had left at the last scan, at least `MIN_STEP`. A box past its quota has its
commands stopped, and the output of the command that was stopped says why. Between two scans a
fast writer gets one step and `POLL` seconds' worth of writing past the quota, no more.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

POLL = 0.5
SCAN_STEP = 64 * 1024 * 1024
MIN_STEP = 4 * 1024 * 1024
SCAN_EVERY = 30.0


def usage(path: Path) -> int:
    """Bytes on disk under `path` (allocated blocks; links not followed, files counted once)."""
    total, seen = 0, set()
    stack = [str(path)]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    if (info.st_dev, info.st_ino) in seen:
                        continue
                    seen.add((info.st_dev, info.st_ino))
                    total += info.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    return total


@dataclass
class _Watched:
    path: Path
    limit: int
    over: Callable[[int], None]  # called with the bytes used, from the watcher's thread
    device: int
    used: int = 0  # at the last scan
    scanned: bool = False


class DiskQuota:
    """The process's watcher (`shared()`); boxes `watch` on open and `unwatch` on close."""

    _shared: DiskQuota | None = None
    _lock = threading.Lock()

    def __init__(self, *, poll: bool = True) -> None:
        self.boxes: dict[int, _Watched] = {}
        self.free: dict[int, int] = {}  # per device: free bytes at the last poll
        self.fallen: dict[int, int] = {}  # per device: how far free space fell since the scan
        self.scanned: dict[int, float] = {}
        self.guard = threading.Lock()
        if poll:  # else the owner calls `look` itself
            threading.Thread(target=self._loop, name="disk-quota", daemon=True).start()

    @classmethod
    def shared(cls) -> DiskQuota:
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def watch(self, key: object, path: Path, limit_mb: int, over: Callable[[int], None]) -> None:
        with self.guard:
            self.boxes[id(key)] = _Watched(path, limit_mb * 1024 * 1024, over, path.stat().st_dev)

    def unwatch(self, key: object) -> None:
        with self.guard:
            self.boxes.pop(id(key), None)

    def _loop(self) -> None:
        while True:
            time.sleep(POLL)
            with contextlib.suppress(Exception):  # the watcher outlives any one bad box
                self.look()

    def look(self) -> None:
        """One round: scan the file systems whose free space fell (or that are due)."""
        with self.guard:
            boxes = list(self.boxes.values())
        for device in {b.device for b in boxes}:
            on_it = [b for b in boxes if b.device == device]
            try:
                stats = os.statvfs(on_it[0].path)
            except OSError:
                continue
            free = stats.f_bavail * stats.f_frsize
            first = device not in self.free or not all(b.scanned for b in on_it)
            fallen = self.fallen.get(device, 0) + max(0, self.free.get(device, free) - free)
            self.free[device] = free
            self.fallen[device] = fallen
            room = min(b.limit - b.used for b in on_it)
            step = max(MIN_STEP, min(SCAN_STEP, room // 2))
            due = time.monotonic() - self.scanned.get(device, 0.0) >= SCAN_EVERY
            if not (first or fallen >= step or due):
                continue
            for box in on_it:
                box.used, box.scanned = usage(box.path), True
                if box.used > box.limit:
                    box.over(box.used)
            self.fallen[device] = 0
            self.scanned[device] = time.monotonic()
