"""What every fault test checks after its run, and the small tools to run one and hurt it."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from swarm.tasks.model import Task
from swarm.tasks.units import Unit, parse_units
from swarm.worker.run import RunPlan

PR_TRAILER = re.compile(r"^Swarm-PR: (\d+)$", re.MULTILINE)


def plan_for(task: Task, run_dir: Path, **kw: Any) -> RunPlan:
    defaults: dict[str, Any] = dict(
        task=task,
        run_dir=run_dir,
        workers=4,
        processes=2,
        harness="sim",
        think=0.5,
        budget_seconds=240,
        eval_every=600,
    )
    return RunPlan(**{**defaults, **kw})


class RunDB:
    """The run's database, read-only (SQLite file or PostgreSQL URL)."""

    def __init__(self, run_dir: Path, database_url: str | None = None) -> None:
        self.run_dir = run_dir
        self.url = database_url

    def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        if self.url is None:
            uri = f"file:{self.run_dir / 'hub.db'}?mode=ro"
            # closing(): sqlite3's own `with` ends the transaction, not the connection, and
            # read-only connections left open made a later one fail with "locking protocol".
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
                return conn.execute(sql, args).fetchall()
        engine = create_engine(self.url)
        try:
            with engine.connect() as conn:
                params = {f"p{i}": a for i, a in enumerate(args)}
                for i in range(len(args)):
                    sql = sql.replace("?", f":p{i}", 1)
                return [tuple(r) for r in conn.execute(text(sql), params).all()]
        finally:
            engine.dispose()

    def one(self, sql: str, *args: Any) -> Any:
        return self.rows(sql, *args)[0][0]


def git(run_dir: Path, *args: str, check: bool = True) -> str:
    return subprocess.run(
        ["git", "-C", str(run_dir / "workspace.git"), *args],
        capture_output=True,
        text=True,
        check=check,
    ).stdout


def units_of(task: Task) -> list[Unit]:
    return parse_units(task.solution_path.read_text(), str(task.solution_path))


def merges_per_unit(run_dir: Path, units: list[Unit]) -> dict[str, int]:
    """How many merges on main's first-parent line bring in each unit's commit."""
    counts = {u.id: 0 for u in units}
    log = git(run_dir, "log", "--first-parent", "--merges", "--format=%H %P", "main")
    for line in log.splitlines():
        _merge, first, second = line.split()
        for subject in git(run_dir, "log", "--format=%s", f"{first}..{second}").splitlines():
            if subject.startswith("unit ") and ":" in subject:
                unit = subject[5:].split(":", 1)[0]
                if unit in counts:
                    counts[unit] += 1
    return counts


def assert_consistent(db: RunDB, task: Task) -> None:
    """The promises every fault must leave true: each unit merged once, each merged PR in the
    database exactly once and on main exactly once, git sound, no claim left open."""
    run_dir = db.run_dir
    units = units_of(task)
    assert merges_per_unit(run_dir, units) == {u.id: 1 for u in units}
    on_main: dict[int, int] = {}
    messages = git(run_dir, "log", "--first-parent", "--merges", "--format=%B%x00", "main")
    for message in messages.split("\x00"):
        for number in PR_TRAILER.findall(message):
            on_main[int(number)] = on_main.get(int(number), 0) + 1
    assert all(n == 1 for n in on_main.values()), f"a PR merged twice: {on_main}"
    merged = dict(db.rows("SELECT number, merge_commit FROM pull_requests WHERE state = 'merged'"))
    assert set(merged) == set(on_main), (sorted(merged), sorted(on_main))
    for commit in merged.values():
        git(run_dir, "merge-base", "--is-ancestor", commit, "main")
    fsck = subprocess.run(
        ["git", "-C", str(run_dir / "workspace.git"), "fsck", "--strict", "--no-progress"],
        capture_output=True,
        text=True,
    )
    assert fsck.returncode == 0, fsck.stderr[-2000:]
    assert db.one("SELECT COUNT(*) FROM claims WHERE ended_at IS NULL") == 0


def wait_until(what: str, check: Callable[[], bool], timeout: float, every: float = 0.2) -> float:
    """Poll `check` until true; the seconds it took. Fails the test after `timeout`."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)
    return time.monotonic() - started


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A real small disk (a tmpfs mounted at `where`; needs root, skips the test otherwise)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


class Filler:
    """Takes a disk's every free byte (true ENOSPC: not a byte left) and keeps taking what the
    run frees meanwhile (a deleted temporary file, a checkpointed journal), until released."""

    CHUNKS = (2**20, 2**16, 4096, 512, 1)

    def __init__(self, disk: Path) -> None:
        self.path = disk / "filler"
        self.full = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="filler", daemon=True)

    def start(self) -> Filler:
        self._thread.start()
        if not self.full.wait(60):
            raise AssertionError(f"{self.path.parent} did not fill up within 60 s")
        return self

    def release(self) -> None:
        """Give the space back (at once, all of it)."""
        self._done.set()
        self._thread.join(timeout=30)
        self.path.unlink(missing_ok=True)

    def _fill(self) -> None:
        with self.path.open("wb", buffering=0) as handle:
            while not self._done.is_set():
                for size in self.CHUNKS:
                    block = b"\0" * size
                    with contextlib.suppress(OSError):
                        while handle.write(block) == size:
                            pass
                self.full.set()
                self._done.wait(0.02)

    def __enter__(self) -> Filler:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.release()


def fsck(git_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(git_dir), "fsck", "--strict", "--no-progress"],
        capture_output=True,
        text=True,
    )
