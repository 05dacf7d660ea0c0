"""A child process's output, kept in a log file of the run directory even when its disk fills.

The hub's and the workers' logs go to the run directory, the disk that fills up; the lines
saying why were the ones lost. So a child writes into a pipe, and a thread of `swarm run`
appends what it reads to the file: lines that do not fit (ENOSPC, a short write) wait in memory,
the newest BACKLOG of them, and go in once space returns, after a line saying how many were
dropped meanwhile. The lines that matter (errors, the disk filling and emptying, dead workers)
are also handed to `forward`, which writes them where the run's disk is not (`swarm run`'s
standard error).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

BACKLOG = 20_000  # lines kept in memory while the file takes none
TAIL = 50
RETRY_SECONDS = 1.0
# `swarm hub`'s format (swarm.cli.LOG_FORMAT) and uvicorn's own ("ERROR:    ...").
IMPORTANT = re.compile(
    r"^\S+ \S+ (?:ERROR|CRITICAL) "
    r"|^\S+ \S+ WARNING swarm\.hub\.(?:disk|liveness):"
    r"|^(?:ERROR|CRITICAL):"
)


def important(line: str) -> bool:
    return IMPORTANT.search(line) is not None


class LogPipe:
    """Give `child_fd` to the child as stdout and stderr, then call `started()`; `close()` once
    it exited writes what is left (as far as the disk lets it)."""

    def __init__(self, path: Path, forward: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.forward = forward
        self.tail: deque[str] = deque(maxlen=TAIL)  # the last lines, for error messages
        self.unwritten: deque[bytes] = deque()
        self.dropped = 0
        self._fd: int | None = None
        self._lock = threading.Lock()  # the pump thread, and close() after it
        self._closing = threading.Event()
        with contextlib.suppress(OSError):  # the file exists from the start, as it did
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        read_fd, self.child_fd = os.pipe()
        self._read_fd = read_fd
        self._thread = threading.Thread(target=self._pump, name=f"log:{path.name}", daemon=True)
        self._thread.start()

    def started(self) -> None:
        """The child has its copy of the write end: drop ours, so its exit ends the pipe."""
        with self._lock:
            # Once only: the number may belong to another file by the second call.
            fd, self.child_fd = self.child_fd, -1
        if fd >= 0:
            os.close(fd)

    def close(self, timeout: float = 5.0) -> None:
        self.started()
        self._closing.set()
        self._thread.join(timeout)
        self._flush()
        self._close_file()

    def _pump(self) -> None:
        partial = b""
        try:
            while True:
                ready, _, _ = select.select([self._read_fd], [], [], RETRY_SECONDS)
                if not ready:
                    self._flush()  # nothing new: retry what waits
                    continue
                chunk = os.read(self._read_fd, 65536)
                if not chunk:
                    break
                *lines, partial = (partial + chunk).split(b"\n")
                for line in lines:
                    self._take(line + b"\n")
                self._flush()
            if partial:
                self._take(partial + b"\n")
        finally:
            os.close(self._read_fd)
        # The child is gone; what waits still goes in once space returns (or at `close`).
        while not self._flush() and not self._closing.wait(RETRY_SECONDS):
            pass

    def _take(self, line: bytes) -> None:
        text = line.decode("utf-8", errors="replace").rstrip("\n")
        self.tail.append(text)
        if self.forward is not None and important(text):
            with contextlib.suppress(Exception):  # a closed terminal must not stop the log
                self.forward(text)
        with self._lock:
            if len(self.unwritten) >= BACKLOG:
                self.unwritten.popleft()
                self.dropped += 1
            self.unwritten.append(line)

    def _flush(self) -> bool:
        """Append what waits; False when the disk took only part of it."""
        with self._lock:
            return self._write_waiting()

    def _close_file(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _write_waiting(self) -> bool:
        if not self.unwritten and not self.dropped:
            return True
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if self.dropped:
                note = f"[{self.dropped} lines were lost while the disk was full]\n".encode()
                if os.write(self._fd, note) < len(note):
                    return False
                self.dropped = 0
            while self.unwritten:
                data = self.unwritten[0]
                written = os.write(self._fd, data)
                if written < len(data):
                    self.unwritten[0] = data[written:]
                    return False
                self.unwritten.popleft()
        except OSError:
            return False
        return True
