"""Running an experiment's grid: each run is a `swarm run` subprocess in its own directory,
one after another or k at a time, resumable, with a progress display over the whole grid."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from swarm.experiment.plan import Plan, RunSpec
from swarm.experiment.state import DONE, FAILED, State
from swarm.tasks.model import load_task

STOP_WAIT = 90.0  # seconds a stopped run gets to stop cleanly before it is killed
# On a loaded machine a worker process's heartbeats come late; taking its workers for dead
# (after SWARM_DEAD_AFTER, 30 s by default) would measure the machine, not the mechanisms.
DEAD_AFTER = "120"


def seeded_task(plan: Plan, task: str, seed: int, into: Path) -> Path:
    """The task folder a run of `task` with `seed` uses. A seeded task (its prepare options
    have a seed, as the hazard workload's) is copied and prepared with the seed and the plan's
    option overrides, once per seed; any other is used as it is (and must be prepared)."""
    source = plan.tasks[task]
    loaded = load_task(source)
    if "seed" not in loaded.prepare_options:
        loaded.require_prepared()
        return source
    target = into / f"{task}-s{seed}"
    if (target / "task.toml").is_file() and load_task(target).is_prepared:
        return target
    from swarm.tasks.prepare import prepare_task

    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, target)
    toml = (target / "task.toml").read_text(encoding="utf-8")
    for key, value in {**plan.prepare_options, "seed": seed}.items():
        toml = _set_option(toml, key, value)
    (target / "task.toml").write_text(toml, encoding="utf-8")
    prepare_task(target, force=True)
    return target


def _set_option(toml: str, key: str, value: Any) -> str:
    """`key = value` in the task.toml's [prepare_options] (replaced, or added under it)."""
    literal = repr(value) if isinstance(value, int | float) and not isinstance(value, bool) else (
        ("true" if value else "false") if isinstance(value, bool) else
        '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"')  # fmt: skip
    header = re.search(r"^\[prepare_options\][ \t]*$", toml, re.M)
    if header is None:
        return toml.rstrip("\n") + f"\n\n[prepare_options]\n{key} = {literal}\n"
    section_end = re.search(r"^\[", toml[header.end() :], re.M)
    end = header.end() + (section_end.start() if section_end else len(toml) - header.end())
    body = toml[header.end() : end]
    line = re.compile(rf"^{re.escape(key)}[ \t]*=.*$", re.M)
    if line.search(body):
        body = line.sub(f"{key} = {literal}", body, count=1)
    else:
        body = f"\n{key} = {literal}" + body
    out = toml[: header.end()] + body + toml[end:]
    tomllib.loads(out)  # still TOML
    return out


def run_command(plan: Plan, spec: RunSpec, task_dir: Path, run_dir: Path) -> list[str]:
    """The `swarm run` a grid's run is (the same code path as a person's)."""
    setup = plan.setup(spec.config.setup)
    o = plan.run
    args = [sys.executable, "-m", "swarm", "run", str(task_dir), "--workers",
            str(spec.config.workers), "--harness", setup.harness, "--without",
            ",".join(spec.config.without), "--run-dir", str(run_dir), "--quiet",
            "--budget", str(o["budget"]), "--eval-every", str(o["eval_every"]),
            "--think", str(o["think"])]  # fmt: skip
    for flag, value in (("--model", setup.model), ("--model-mix", setup.model_mix),
                        ("--api-base", setup.api_base), ("--max-cost", o.get("max_cost")),
                        ("--sandbox", o.get("sandbox")), ("--processes", o.get("processes")),
                        ("--merge-check", o.get("merge_check")),
                        ("--required-approvals", o.get("required_approvals")),
                        ("--database-url", o.get("database_url"))):  # fmt: skip
        if value is not None:
            args += [flag, str(value)]
    return args


def run_cost(run_dir: Path) -> float | None:
    """Dollars the run's sessions spent (its SQLite database), None when it has none."""
    db = run_dir / "hub.db"
    if not db.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            (total,) = conn.execute("SELECT COALESCE(SUM(cost), 0) FROM sessions").fetchone()
        return float(total)
    except sqlite3.Error:
        return None


@dataclass
class Running:
    spec: RunSpec
    proc: subprocess.Popen[bytes]
    started: float
    log: IO[bytes]
    run_dir: Path


@dataclass
class Grid:
    """Runs the plan's unfinished runs; `run()` answers how many were left unfinished."""

    plan: Plan
    state: State
    parallel: int = 1
    cpu_budget: float | None = None
    retry_failed: bool = False
    console: Console = field(default_factory=lambda: Console(stderr=True))
    stop_signals: list[str] = field(default_factory=list)
    now: Callable[[], float] = time.time

    @property
    def dir(self) -> Path:
        return self.state.dir

    def pending(self) -> list[RunSpec]:
        return [s for s in self.plan.runs()
                if not self.state.finished(s.id, retry_failed=self.retry_failed)]  # fmt: skip

    def spent(self) -> float:
        return sum(r.get("cost") or 0.0 for r in self.state.runs.values())

    def _may_start(self, running: dict[str, Running], last_start: float) -> bool:
        if len(running) >= self.parallel:
            return False
        if self.plan.max_cost is not None and self.spent() >= self.plan.max_cost:
            return False
        if not running or self.cpu_budget is None:
            return True
        # The load average follows a new run within a minute: a pause between starts.
        return self.now() - last_start >= 20 and os.getloadavg()[0] < self.cpu_budget

    def _start(self, spec: RunSpec) -> Running:
        task_dir = seeded_task(self.plan, spec.config.task, spec.seed, self.dir / "tasks")
        run_dir = self.dir / "runs" / spec.id
        if run_dir.exists():  # a run killed midway (or failed, retried): redone from nothing
            shutil.rmtree(run_dir)
        (self.dir / "logs").mkdir(exist_ok=True)
        log = open(self.dir / "logs" / f"{spec.id}.log", "wb")  # noqa: SIM115 (closed in _finish)
        env = {**os.environ, "SWARM_SEED": str(spec.seed)}
        env.setdefault("SWARM_DEAD_AFTER", DEAD_AFTER)
        env.pop("SWARM_WITHOUT", None)  # the plan's switches only
        proc = subprocess.Popen(
            run_command(self.plan, spec, task_dir, run_dir),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # a terminal's Ctrl-C reaches the grid, which stops them
        )
        return Running(spec, proc, self.now(), log, run_dir)

    def _finish(self, r: Running, code: int) -> str:
        r.log.close()
        ended = self.now()
        info: dict[str, Any] = {}
        with contextlib.suppress(OSError, tomllib.TOMLDecodeError):
            info = tomllib.loads((r.run_dir / "run.toml").read_text())
        because = str(info.get("stopped_because", ""))
        if code == 0 and "ended" in info and not because.startswith("stopped by"):
            status = DONE
        elif code != 0 and not because.startswith("stopped by"):
            status = FAILED
        else:  # stopped from outside: not a result, redone on resume
            return "interrupted"
        self.state.runs[r.spec.id] = {
            "status": status, "config": r.spec.config.label, "seed": r.spec.seed,
            "started": r.started, "ended": ended, "wall": ended - r.started, "exit_code": code,
            "stopped_because": because, "cost": run_cost(r.run_dir),
            "run_dir": str(r.run_dir.relative_to(self.dir)),
        }  # fmt: skip
        self.state.save()
        return status

    def estimate(self, pending: list[RunSpec], running: dict[str, Running]) -> str:
        """Time (and, with a model, cost) left, from the finished runs' walls and costs."""
        done = [r for r in self.state.runs.values() if r["status"] == DONE]
        if not done:
            return "time left: after the first run"
        walls: dict[int, list[float]] = {}
        for spec in self.plan.runs():
            record = self.state.runs.get(spec.id)
            if record and record["status"] == DONE:
                walls.setdefault(spec.config.workers, []).append(float(record["wall"]))
        overall = sum(float(r["wall"]) for r in done) / len(done)

        def guess(spec: RunSpec) -> float:
            seen = walls.get(spec.config.workers)
            return sum(seen) / len(seen) if seen else overall

        left = sum(guess(s) for s in pending)
        left += sum(max(0.0, guess(r.spec) - (self.now() - r.started)) for r in running.values())
        left /= max(1, min(self.parallel, len(pending) + len(running)))
        text = f"time left ~{_duration(left)}"
        if any(s.uses_model for s in self.plan.setups):
            costs = [float(r.get("cost") or 0.0) for r in done]
            mean = sum(costs) / len(costs)
            text += (
                f" · cost ${self.spent():.2f}, ~${mean * (len(pending) + len(running)):.2f} left"
            )
        return text

    def run(self) -> int:
        """Run what is unfinished; answers the number of runs still unfinished afterwards."""
        pending = self.pending()
        total = len(self.plan.runs())
        running: dict[str, Running] = {}
        last_start = 0.0
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[note]}"))  # fmt: skip
        progress = Progress(*columns, console=self.console, transient=False)
        done_before = total - len(pending)
        bar = progress.add_task(self.plan.name, total=total, completed=done_before, note="")
        self.console.print(
            f"swarm experiment {self.plan.name}: {total} runs, {done_before} already finished, "
            f"{len(pending)} to run ({self.parallel} at a time) in {self.dir}"
        )
        try:
            with progress:
                while (pending or running) and not self.stop_signals:
                    for run_id, r in list(running.items()):
                        code = r.proc.poll()
                        if code is None:
                            continue
                        del running[run_id]
                        status = self._finish(r, code)
                        if status == "interrupted":
                            pending.insert(0, r.spec)
                        else:
                            progress.advance(bar)
                        progress.console.print(
                            f"{status}: {run_id} in {_duration(self.now() - r.started)}"
                            + (f" (exit {code}; see logs/{run_id}.log)" if code else "")
                        )
                    while pending and self._may_start(running, last_start):
                        spec = pending.pop(0)
                        running[spec.id] = self._start(spec)
                        last_start = self.now()
                    if (not running and pending and self.plan.max_cost is not None
                            and self.spent() >= self.plan.max_cost):  # fmt: skip
                        progress.console.print(
                            f"the plan's max_cost (${self.plan.max_cost:.2f}) is spent "
                            f"(${self.spent():.2f}): no new runs"
                        )
                        break
                    note = ", ".join(running) if running else ""
                    progress.update(bar, note=f"{self.estimate(pending, running)} · running: "
                                    f"{note or '—'}")  # fmt: skip
                    time.sleep(0.5)
                if self.stop_signals:
                    self._stop_all(running, progress)
        except BaseException:  # the grid failed (a task that does not prepare, …): none outlives it
            self.stop_signals.append("an error")
            self._stop_all(running, progress)
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        left = len(self.pending())
        return left

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stop_signals.append(signal.Signals(signum).name)

    def _stop_all(self, running: dict[str, Running], progress: Progress) -> None:
        """Every running run is asked to stop (SIGTERM: it stops cleanly, releasing its
        claims); none is recorded as finished, so a resume redoes them."""
        if running:
            progress.console.print(
                f"stopping ({self.stop_signals[0]}): {len(running)} running run(s) stop and "
                "will be redone on resume …"
            )
        for r in running.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(r.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT
        for r in running.values():
            try:
                r.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(r.proc.pid, signal.SIGKILL)
                r.proc.wait()
            r.log.close()


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"
