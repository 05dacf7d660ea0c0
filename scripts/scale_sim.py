"""Simulated workers at 1, 8, 64, 256 and 1,024 on a scale task: wall time, speedup, duplicated
work, merge conflicts, overlapping claims, messages, hub p99 latency and peak memory.

    .venv/bin/python scripts/scale_sim.py [--quick] [--json] [--sizes 1,8,64] [--think 2]

Each size runs `swarm run` (hub process, worker processes, evaluator) on a task of
max(--min-units, --units-per-worker x N) independent one-file units; a unit takes `--think`
seconds of simulated work, so one worker needs about units x (think + overhead) seconds.
Speedup is throughput (units merged per second, start-up included) over the 1-worker run's.
Counts come from the run's database (hub.db) and git (workspace.git); see docs/scaling.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pygit2

from swarm.tasks.demo import make_scale_task
from swarm.tasks.model import Task
from swarm.tasks.units import Unit, parse_units
from swarm.worker.run import Run, RunPlan

FULL_SIZES = [1, 8, 64, 256, 1024]
QUICK_SIZES = [1, 8, 32]


# -- measuring ---------------------------------------------------------------------------------
class MemorySampler:
    """Samples the RSS of the hub and of the worker processes (git children not included)."""

    def __init__(self, run: Run, every: float = 0.5) -> None:
        self.run = run
        self.every = every
        self.peak_total = 0
        self.peak_hub = 0
        self.peak_workers = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.procs: dict[int, psutil.Process] = {}

    def _rss(self, pid: int) -> int:
        try:
            proc = self.procs.get(pid) or self.procs.setdefault(pid, psutil.Process(pid))
            return int(proc.memory_info().rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return 0

    def sample(self) -> None:
        hub = self.run.hub.process.pid if self.run.hub and self.run.hub.process else None
        hub_rss = self._rss(hub) if hub else 0
        workers = sum(self._rss(p.pid) for p in self.run.workers if p.poll() is None)
        self.peak_hub = max(self.peak_hub, hub_rss)
        self.peak_workers = max(self.peak_workers, workers)
        self.peak_total = max(self.peak_total, hub_rss + workers)

    def _loop(self) -> None:
        while not self.done.wait(self.every):
            self.sample()

    def start(self) -> MemorySampler:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=5)


class LatencyProbe:
    """Client-side fallback for the hub's latency when it writes no hub-timing.json: the
    operator lists active claims (a database read, like the workers' commonest call) every
    `every` seconds and times the answer."""

    def __init__(self, url: str, token: str, every: float = 0.2) -> None:
        self.client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        )
        self.every = every
        self.samples: list[float] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.done.wait(self.every):
            started = time.perf_counter()
            try:
                self.client.get("/v1/claims", params={"limit": 1})
            except httpx.HTTPError:
                continue
            self.samples.append(time.perf_counter() - started)

    def start(self) -> LatencyProbe:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=130)
        self.client.close()

    def p99(self) -> float:
        if len(self.samples) < 2:
            return self.samples[0] if self.samples else 0.0
        return statistics.quantiles(self.samples, n=100, method="inclusive")[98]


def unit_paths(units: list[Unit]) -> dict[str, str]:
    """path -> unit id (scale units are one file each)."""
    return {edit.path: unit.id for unit in units for edit in unit.edits}


def merged_units(git_dir: Path, units: list[Unit]) -> dict[str, Any]:
    """For each merge on main's first-parent line: the units its PR changed (the PR's own
    commits: merge base .. PR head). A unit changed by more than one merged PR is duplicated
    work. Also: the units whose solution is on main."""
    repo = pygit2.Repository(str(git_dir))
    by_path = unit_paths(units)
    landed: dict[str, int] = {}
    merges = 0
    commit = repo.revparse_single("refs/heads/main").peel(pygit2.Commit)
    while commit.parents:
        parents = commit.parents
        if len(parents) == 2:
            merges += 1
            base = repo.merge_base(parents[0].id, parents[1].id)
            old = repo[base].peel(pygit2.Commit).tree if base else None
            new = parents[1].tree
            diff = repo.diff(old, new) if old is not None else new.diff_to_tree()
            for patch in diff:
                unit = by_path.get(patch.delta.new_file.path)
                if unit:
                    landed[unit] = landed.get(unit, 0) + 1
        commit = parents[0]
    tree = repo.revparse_single("refs/heads/main").peel(pygit2.Commit).tree
    on_main = 0
    for unit in units:
        ok = True
        for edit in unit.edits:
            try:
                text = repo[tree[edit.path].id].data.decode()
            except KeyError:
                ok = False
                break
            if edit.old in text or edit.new not in text:
                ok = False
        on_main += ok
    twice = sorted(u for u, n in landed.items() if n > 1)
    return {"merges": merges, "landed": len(landed), "twice": twice, "on_main": on_main}


def overlapping_claims(rows: list[tuple[int, str, float, float | None, float]]) -> int:
    """Claims that overlapped an earlier claim still open at the time on a shared scope item."""
    by_item: dict[str, list[tuple[float, float]]] = {}
    count = 0
    for _id, scope, created, ended, lease in sorted(rows, key=lambda r: r[0]):
        end = ended if ended is not None else lease
        hit = False
        for item in scope.split("\n"):
            spans = by_item.setdefault(item, [])
            if any(s <= created < e for s, e in spans):
                hit = True
            spans.append((created, end))
        count += hit
    return count


def db_figures(db_path: Path) -> dict[str, Any]:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        claims = conn.execute(
            "SELECT id, scope, created_at, ended_at, lease_until FROM claims"
        ).fetchall()
        return {
            "claims": len(claims),
            "claims_overlapped": overlapping_claims(claims),
            "messages": one("SELECT COUNT(*) FROM messages"),
            "direct_messages": one("SELECT COUNT(*) FROM messages WHERE recipient_id IS NOT NULL"),
            "entries": one("SELECT COUNT(*) FROM entries"),
            "prs_opened": one("SELECT COUNT(*) FROM pull_requests"),
            "prs_merged": one("SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'"),
            "merge_conflicts": one("SELECT COUNT(*) FROM pr_events WHERE kind = 'conflict'"),
            "sessions": one("SELECT COUNT(*) FROM sessions"),
            "session_errors": one("SELECT COUNT(*) FROM sessions WHERE ended = 'error'"),
        }


# -- running -----------------------------------------------------------------------------------
@dataclass
class Size:
    workers: int
    units: int
    figures: dict[str, Any] = field(default_factory=dict)


def run_size(
    task: Task, workers: int, think: float, root: Path, budget: float, log: Any
) -> dict[str, Any]:
    run_dir = root / f"run-{workers}"
    plan = RunPlan(
        task=task,
        run_dir=run_dir,
        workers=workers,
        harness="sim",
        think=think,
        budget_seconds=budget,
        eval_every=10 * budget,
    )
    run = Run(plan)
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    run.start()
    ready = time.monotonic()
    assert run.hub is not None
    sampler = MemorySampler(run).start()
    probe = LatencyProbe(run.hub.url, run.hub.operator_token).start()
    reason = None
    last = 0.0
    try:
        while (reason := _poll(run)) is None:
            time.sleep(0.5)
            if time.monotonic() - last > 15:
                merged = _count(
                    run_dir, "SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'"
                )
                log(
                    f"  {workers} workers, {time.monotonic() - started:.0f}s: merged "
                    f"{merged}/{task_units(task)} PRs"
                )
                last = time.monotonic()
    finally:
        finished = time.monotonic()
        probe.stop()
        sampler.stop()
        outcome = run.stop(reason or "interrupted")
    units = parse_units(task.solution_path.read_text(), str(task.solution_path))
    git = merged_units(run_dir / "workspace.git", units)
    db = db_figures(run_dir / "hub.db")
    timing_file = run_dir / "hub-timing.json"
    if timing_file.is_file():
        timing = json.loads(timing_file.read_text())
        p99, p99_source = timing["api"]["p99"], "server, API calls"
        git_p99 = timing["all"]["p99"]
    else:
        p99, p99_source, git_p99 = probe.p99(), "client probe", None
    final = outcome.final
    return {
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "wall_time": finished - started,
        "start_seconds": ready - started,
        "stopped_because": reason,
        "units": len(units),
        "units_on_main": git["on_main"],
        "units_merged_twice": len(git["twice"]),
        "duplicated_work_pct": 100.0 * len(git["twice"]) / max(1, len(units)),
        "merges_on_main": git["merges"],
        "hidden_tests_passed": final.passed if final else 0,
        "hidden_tests_total": final.total if final else 0,
        "hub_p99_ms": 1e3 * p99,
        "hub_p99_source": p99_source,
        "hub_p99_all_ms": None if git_p99 is None else 1e3 * git_p99,
        "peak_rss_mib": sampler.peak_total / 2**20,
        "peak_rss_hub_mib": sampler.peak_hub / 2**20,
        "peak_rss_workers_mib": sampler.peak_workers / 2**20,
        **db,
    }


def _count(run_dir: Path, sql: str) -> int:
    try:
        with sqlite3.connect(f"file:{run_dir / 'hub.db'}?mode=ro", uri=True, timeout=5) as c:
            return int(c.execute(sql).fetchone()[0])
    except sqlite3.Error:
        return -1


def _poll(run: Run) -> str | None:
    try:
        return run.poll()
    except Exception as exc:  # the hub went away: end this size, report it
        return f"error: {exc}"


def task_units(task: Task) -> int:
    return len(parse_units(task.solution_path.read_text(), str(task.solution_path)))


UNITS = {
    "wall_time": "s",
    "start_seconds": "s",
    "speedup": "x",
    "units": "units",
    "units_on_main": "units",
    "units_merged_twice": "units",
    "duplicated_work_pct": "%",
    "merges_on_main": "merges",
    "merge_conflicts": "conflicts",
    "claims": "claims",
    "claims_overlapped": "claims",
    "messages": "messages",
    "direct_messages": "messages",
    "entries": "entries",
    "prs_opened": "PRs",
    "prs_merged": "PRs",
    "sessions": "sessions",
    "session_errors": "sessions",
    "hub_p99_ms": "ms",
    "hub_p99_all_ms": "ms",
    "peak_rss_mib": "MiB",
    "peak_rss_hub_mib": "MiB",
    "peak_rss_workers_mib": "MiB",
    "hidden_tests_passed": "tests",
    "hidden_tests_total": "tests",
    "throughput": "units/s",
    "load_before": "load",
    "load_after": "load",
}

COLUMNS = [
    ("workers", "workers", "{:d}"),
    ("units", "units", "{:d}"),
    ("wall_time", "wall s", "{:.1f}"),
    ("start_seconds", "start s", "{:.1f}"),
    ("speedup", "speedup", "{:.1f}x"),
    ("units_merged_twice", "dup", "{:d}"),
    ("duplicated_work_pct", "dup %", "{:.2f}"),
    ("merge_conflicts", "conflicts", "{:d}"),
    ("claims_overlapped", "overlap", "{:d}"),
    ("claims", "claims", "{:d}"),
    ("messages", "msgs", "{:d}"),
    ("hub_p99_ms", "hub p99 ms", "{:.0f}"),
    ("peak_rss_mib", "peak MiB", "{:.0f}"),
    ("units_on_main", "on main", "{:d}"),
    ("load_before", "load", "{:.0f}"),
]


def print_table(rows: list[dict[str, Any]]) -> None:
    cells = [[h for _k, h, _f in COLUMNS]]
    for row in rows:
        cells.append([("-" if row.get(k) is None else f.format(row[k])) for k, _h, f in COLUMNS])
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    for n, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        if n == 0:
            print("  ".join("-" * w for w in widths))
    if rows:
        print(
            f"\nhub p99: {rows[0].get('hub_p99_source')}; peak memory: hub + worker "
            "processes (RSS, sampled every 0.5 s); dup = units merged by more than one PR"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes 1, 8, 32; small task")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure a line")
    parser.add_argument("--sizes", help="comma-separated worker counts")
    parser.add_argument("--think", type=float, help="seconds of simulated work per unit")
    parser.add_argument("--min-units", type=int, help="units for the smallest sizes")
    parser.add_argument("--units-per-worker", type=int, default=2)
    parser.add_argument("--budget", type=float, default=900.0, help="seconds per size at most")
    parser.add_argument("--root", type=Path, help="where the runs go (default: a temp dir)")
    args = parser.parse_args(argv)
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else (QUICK_SIZES if args.quick else FULL_SIZES)
    )
    think = args.think if args.think is not None else (0.2 if args.quick else 2.0)
    min_units = args.min_units or (12 if args.quick else 32)
    root = (args.root or Path(tempfile.mkdtemp(prefix="swarm-scale-"))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    limit = _raise_fd_limit()

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    log(f"scale_sim: sizes {sizes}, think {think}s, runs in {root} (open files limit {limit})")
    rows: list[dict[str, Any]] = []
    base_rate: float | None = None
    tasks: dict[int, Task] = {}
    for workers in sizes:
        units = max(min_units, args.units_per_worker * workers)
        if units not in tasks:
            tasks[units] = make_scale_task(root / f"task-{units}", units=units)
        log(f"{workers} workers on {units} units …")
        figures = run_size(tasks[units], workers, think, root, args.budget, log)
        rate = figures["units_on_main"] / figures["wall_time"]
        if base_rate is None and workers == 1:
            base_rate = rate
        figures["throughput"] = rate
        figures["speedup"] = rate / base_rate if base_rate else None
        row = {"workers": workers, **figures}
        rows.append(row)
        log(
            f"  done in {figures['wall_time']:.1f}s: {figures['units_on_main']}/{units} on main, "
            f"{figures['units_merged_twice']} merged twice, p99 {figures['hub_p99_ms']:.0f} ms, "
            f"peak {figures['peak_rss_mib']:.0f} MiB"
        )
        if args.json:
            for key, value in row.items():
                if key in UNITS:
                    print(
                        json.dumps(
                            {"figure": key, "value": value, "unit": UNITS[key], "workers": workers}
                        ),
                        flush=True,
                    )
    if not args.json:
        print_table(rows)
    return 0


def _raise_fd_limit() -> int:
    """Each worker holds a few sockets and pipes: lift the soft limit to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, ValueError, OSError):
        return -1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
