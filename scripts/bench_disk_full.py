"""How a run rides out its disk filled to the last byte, and how fast it recovers.

A real `swarm run` of the scale task (simulated workers, real hub, git and evaluator) with its
run directory on a small tmpfs. Once merges are under way a filler takes every free byte (true
ENOSPC, past the disk guard's threshold) and keeps it for `--full-for` seconds, longer than the
clients retry (`SWARM_HUB_RETRY_SECONDS`), so sessions fail; then the space returns at once.
Prints how long the hub took to take writes again, to the next merge and to the end of the run,
what was refused and failed meanwhile, and whether the end state is sound. Needs root (mount).
With SQLite the database is on the full disk too; with PostgreSQL only git, the checkouts and
the logs are. `--json`: one {"figure", "value", "unit"} object per line; `--quick`: 6 units,
8 s full, SQLite only, within a minute.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _bench import Figures, database_url, parser, workdir

from swarm.tasks.demo import make_scale_task
from swarm.worker.run import Run, RunPlan


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@contextlib.contextmanager
def filled(disk: Path) -> Iterator[None]:
    """Every free byte of `disk` taken, and what the run frees taken again, until the end."""
    done, full = threading.Event(), threading.Event()
    path = disk / "filler"

    def fill() -> None:
        with path.open("wb", buffering=0) as handle:
            while not done.is_set():
                for size in (2**20, 2**16, 4096, 512, 1):
                    with contextlib.suppress(OSError):
                        while handle.write(b"\0" * size) == size:
                            pass
                full.set()
                done.wait(0.02)

    thread = threading.Thread(target=fill, daemon=True)
    thread.start()
    full.wait(60)
    try:
        yield
    finally:
        done.set()
        thread.join(30)
        path.unlink(missing_ok=True)


def until(check: Callable[[], bool], timeout: float) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout:.0f}s")
        time.sleep(0.1)
    return time.monotonic() - started


class Rows:
    """The run's database, read-only (SQLite file or PostgreSQL URL)."""

    def __init__(self, run_dir: Path, url: str | None) -> None:
        self.run_dir, self.url = run_dir, url

    def one(self, sql: str) -> Any:
        if self.url is None:
            uri = f"file:{self.run_dir / 'hub.db'}?mode=ro"
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
                return conn.execute(sql).fetchone()[0]
        from sqlalchemy import create_engine, text

        engine = create_engine(self.url)
        try:
            with engine.connect() as conn:
                return conn.execute(text(sql)).scalar()
        finally:
            engine.dispose()


def one_run(figures: Figures, engine: str, units: int, full_for: float, root: Path) -> None:
    with contextlib.ExitStack() as stack:
        disk = stack.enter_context(tmpfs(root / f"disk-{engine}", "96m"))
        url = None if engine == "sqlite" else stack.enter_context(database_url(engine, root))
        task = make_scale_task(root / f"task-{engine}", units=units)
        plan = RunPlan(
            task=task, run_dir=disk / "run", workers=4, processes=2, harness="sim", think=0.5,
            budget_seconds=600, eval_every=600, database_url=url, sandbox="none",
        )  # fmt: skip
        run = Run(plan, on_hub_line=lambda line: figures.log(f"hub: {line[:160]}"))
        rows = Rows(plan.run_dir, url)
        merged = "SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'"
        run.start()
        try:
            until(lambda: rows.one(merged) >= 2, 120)
            figures.log(f"{engine}: filling the disk for {full_for:.0f} s")
            with filled(disk):
                at_fill = rows.one(merged)
                ends = time.monotonic() + full_for
                while time.monotonic() < ends:
                    if run.poll() is not None:
                        raise SystemExit("the run gave up on the full disk")
                    time.sleep(0.5)
            back = time.monotonic()
            writes = until(lambda: not run.summary().get("disk", {}).get("full"), 60)
            merge = until(lambda: rows.one(merged) > max(at_fill, 2), 120)
            while (reason := run.poll()) is None:
                time.sleep(0.2)
            finished = time.monotonic() - back
            outcome = run.stop(reason)
        except BaseException:
            run.stop("benchmark failed")
            raise
        fsck = subprocess.run(
            ["git", "-C", str(plan.run_dir / "workspace.git"), "fsck", "--strict"],
            capture_output=True,
            text=True,
        )
        failed = rows.one("SELECT COUNT(*) FROM sessions WHERE detail LIKE 'disk full: %'")
        open_claims = rows.one("SELECT COUNT(*) FROM claims WHERE ended_at IS NULL")
        fails = rows.one("SELECT COUNT(*) FROM entries WHERE type = 'FAIL'")
    final = outcome.final
    figures.add("space back -> hub takes writes", writes, "s", engine=engine)
    figures.add("space back -> next merge", merge, "s", engine=engine)
    figures.add("space back -> run finished", finished, "s", engine=engine)
    figures.add("disk full (as the hub saw it)", outcome.disk.get("full_seconds", 0), "s",
                engine=engine)  # fmt: skip
    figures.add("writes refused (507)", outcome.disk.get("refused", 0), "count", engine=engine)
    figures.add("sessions failed by the full disk", failed, "count", engine=engine)
    figures.add("FAIL entries (claims ended, why)", fails, "count", engine=engine)
    figures.add("claims left open", open_claims, "count", engine=engine)
    figures.add("git fsck --strict exit code", fsck.returncode, "code", engine=engine)
    figures.add("hidden tests passed at the end", final.passed if final else 0, "count",
                engine=engine, note=f"of {final.total if final else '?'}; exit "
                f"{outcome.exit_code}")  # fmt: skip


def main() -> None:
    args_parser = parser(__doc__)
    args_parser.add_argument("--full-for", type=float, help="Seconds the disk stays full.")
    args_parser.add_argument("--units", type=int, help="Units of the scale task.")
    args = args_parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_disk_full needs root: it mounts a tmpfs")
    chosen = ("sqlite",) if args.quick and args.engine == "both" else None
    engines = chosen or (("sqlite", "postgres") if args.engine == "both" else (args.engine,))
    full_for = args.full_for or (8.0 if args.quick else 25.0)
    units = args.units or (6 if args.quick else 12)
    # Shorter than the time the disk stays full: sessions fail, as they did when this was found.
    os.environ.setdefault("SWARM_HUB_RETRY_SECONDS", str(max(2.0, full_for / 3)))
    os.environ.setdefault("SWARM_MIN_FREE_MB", "16")  # the guard is on; the filler goes past it
    figures = Figures(args.json)
    with workdir("swarm-bench-disk-") as root:
        for engine in engines:
            one_run(figures, engine, units, full_for, root)
    figures.table()
    sys.exit(0)


if __name__ == "__main__":
    main()
