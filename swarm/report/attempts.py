"""The sim's record of its attempts (`<run>/workers/attempts/<worker>.jsonl`, written by
swarm.harness.sim_hazard whatever the run's switches), and the measures read from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FOLDER = Path("workers") / "attempts"


def read_attempts(run_dir: Path) -> list[dict[str, Any]] | None:
    """Every attempt, oldest first; None when the run kept no such record (a model's run)."""
    folder = run_dir / FOLDER
    if not folder.is_dir():
        return None
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a killed worker
            if isinstance(row, dict) and {"unit", "began", "ended", "outcome"} <= set(row):
                rows.append(row)
    return sorted(rows, key=lambda r: (float(r["began"]), str(r.get("worker"))))


def repeated_failures(attempts: list[dict[str, Any]]) -> int:
    """Failed attempts whose reason (the same unit, the same words) an earlier failed attempt
    had already met, and recorded as a FAIL where the run had the context, before this attempt
    began: failures the team could have known about."""
    failed = [a for a in attempts if a["outcome"] == "failed"]
    count = 0
    for attempt in failed:
        key = (attempt["unit"], attempt.get("reason", ""))
        if any(
            (other["unit"], other.get("reason", "")) == key
            and float(other["ended"]) <= float(attempt["began"])
            for other in failed
            if other is not attempt
        ):
            count += 1
    return count


def thrown_away(attempts: list[dict[str, Any]]) -> int:
    """Finished attempts whose unit main already held when they came to merge (a peer did it)."""
    return sum(1 for a in attempts if a["outcome"] == "duplicate")
