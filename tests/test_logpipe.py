"""A child's log through swarm.worker.logpipe: kept in order, the lines that matter forwarded,
and on a disk full to the last byte (a real tmpfs) held in memory until space returns."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarm.worker.logpipe import LogPipe, important
from tests.faults.faultkit import Filler, tmpfs, wait_until

LINES = 2000
INFO = "2026-12-01 10:00:00,000 INFO swarm.x: line"
CHILD = (
    "import sys\n"
    f"for i in range({LINES}):\n"
    f"    print('{INFO}', i, flush=True)\n"
    "print('2026-12-01 10:00:01,000 ERROR swarm.hub.disk: the disk under /run is full', "
    "file=sys.stderr, flush=True)\n"
)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "4m") as mounted:
        yield mounted


def _child(log: LogPipe) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdout=log.child_fd, stderr=log.child_fd
    )
    log.started()
    return child


def test_a_child_log_is_written_in_order_and_errors_are_forwarded(tmp_path: Path) -> None:
    forwarded: list[str] = []
    log = LogPipe(tmp_path / "child.log", forward=forwarded.append)
    assert _child(log).wait(timeout=60) == 0
    log.close()
    lines = (tmp_path / "child.log").read_text().splitlines()
    assert lines[:LINES] == [f"{INFO} {i}" for i in range(LINES)]
    assert forwarded == [lines[-1]] and "ERROR swarm.hub.disk" in lines[-1]
    assert list(log.tail)[-1] == lines[-1]


def test_what_a_full_disk_cannot_take_is_written_once_space_returns(disk: Path) -> None:
    forwarded: list[str] = []
    path = disk / "child.log"
    log = LogPipe(path, forward=forwarded.append)
    filler = Filler(disk).start()
    try:
        assert _child(log).wait(timeout=60) == 0
        # The reason reached a person at once, though the log file could hold none of it.
        wait_until("the error line forwarded", lambda: len(forwarded) == 1, timeout=30)
        assert "the disk under /run is full" in forwarded[0]
        assert len(path.read_bytes()) < 4096  # a page at most: the disk is full
    finally:
        filler.release()
    wait_until(
        "the waiting lines written",
        lambda: path.read_text().count("\n") == LINES + 1,
        timeout=30,
    )
    log.close()
    lines = path.read_text().splitlines()
    assert lines[-1] == forwarded[0]
    assert [line.rsplit(" ", 1)[-1] for line in lines[:LINES]] == [str(i) for i in range(LINES)]


def test_closing_twice_closes_nobody_elses_file(tmp_path: Path) -> None:
    """A hub started again closed its old pipe's write end a second time: by then that number
    was another file's (the test process's CA bundle: EBADF in an unrelated thread)."""
    log = LogPipe(tmp_path / "child.log")
    number = log.child_fd
    log.started()  # (no child: nothing to read)
    other = os.open(tmp_path / "other", os.O_WRONLY | os.O_CREAT)
    if other != number:  # the number is another file's now, as it was in the hub's case
        os.dup2(other, number)
        os.close(other)
    try:
        log.close()
        log.close()
        os.write(number, b"still open\n")  # EBADF if close() reached this number
    finally:
        os.close(number)
    assert (tmp_path / "other").read_text() == "still open\n"


def test_the_lines_that_matter() -> None:
    assert important("2026-12-01 10:00:00,000 ERROR swarm.hub.app: boom")
    assert important("2026-12-01 10:00:00,000 WARNING swarm.hub.disk: takes writes again")
    assert important("2026-12-01 10:00:00,000 WARNING swarm.hub.liveness: w3 is dead")
    assert important("ERROR:    Exception in ASGI application")
    assert not important("2026-12-01 10:00:00,000 WARNING swarm.hub.timing: hub latency")
    assert not important("INFO:     Uvicorn running on http://127.0.0.1:1")
    assert not important('  File "x.py", line 1, in ERROR')
