"""What `run.toml` says about a run (task, workers, budget, times), read defensively."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunInfo:
    name: str
    task: str | None = None
    workers: int | None = None
    harness: str | None = None
    model: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    budget_seconds: float | None = None
    budget_cost: float | None = None
    database_url: str | None = None
    without: tuple[str, ...] = ()  # mechanisms the run was without (swarm.switches)
    raw: dict[str, Any] = field(default_factory=dict)

    def deadline(self) -> float | None:
        if self.started_at is None or self.budget_seconds is None:
            return None
        return self.started_at + self.budget_seconds


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if hasattr(value, "timestamp"):  # a TOML datetime
        return float(value.timestamp())
    return None


def _first(table: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if table.get(key) is not None:
            return table[key]
    return None


def read_run_info(run_dir: Path) -> RunInfo:
    """The run's description; a run without (or with an unreadable) run.toml gets the defaults."""
    raw: dict[str, Any] = {}
    path = run_dir / "run.toml"
    if path.is_file():
        try:
            raw = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
            raw = {}
    # Accept settings at the top level or nested under [run]/[budget].
    run = {**raw, **(raw.get("run") or {})} if isinstance(raw.get("run"), dict) else dict(raw)
    budget = run.get("budget")
    budget_table = budget if isinstance(budget, dict) else {}
    seconds = _first(budget_table, "seconds", "time_seconds", "wall_seconds", "time")
    if seconds is None:
        seconds = _first(run, "budget_seconds", "time_budget", "duration")
    if seconds is None and not budget_table:
        seconds = budget
    minutes = _first(budget_table, "minutes") or run.get("budget_minutes")
    if seconds is None and minutes is not None:
        seconds = float(minutes) * 60
    cost = _first(budget_table, "cost", "usd", "dollars") or run.get("budget_cost")
    cost = cost or run.get("max_cost") or None  # `swarm run` writes max_cost = 0.0 for none
    task = run.get("task_name") or run.get("task")
    if isinstance(task, dict):
        task = task.get("name") or task.get("path")
    workers = run.get("workers")
    return RunInfo(
        name=run_dir.resolve().name,
        task=str(task) if task is not None else None,
        workers=int(workers) if isinstance(workers, int) else None,
        harness=str(run["harness"]) if run.get("harness") else None,
        model=str(run["model"]) if run.get("model") else None,
        started_at=_number(_first(run, "started_at", "started", "start")),
        ended_at=_number(_first(run, "ended_at", "ended", "end")),
        budget_seconds=_number(seconds),
        budget_cost=_number(cost),
        database_url=str(run["database_url"]) if run.get("database_url") else None,
        without=tuple(sorted(str(w) for w in run.get("without") or () if isinstance(w, str))),
        raw=raw,
    )
