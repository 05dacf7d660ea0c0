"""An experiment directory: its plan, its state file (which runs are finished) and its runs.

DIR/plan.toml          a copy of the plan the grid was started with
DIR/experiment.json    the state: the plan (resolved) and every finished run, written
                       atomically after each run (a new file renamed over the old one)
DIR/tasks/<task>-s<seed>/   a seeded task, prepared once for every run of that seed
DIR/runs/<run id>/     one `swarm run` each
DIR/logs/<run id>.log  its output
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm.errors import InvalidInput, NotFound
from swarm.experiment.plan import Plan, plan_from_json

STATE = "experiment.json"
VERSION = 1
DONE = "done"
FAILED = "failed"


def is_experiment(path: Path) -> bool:
    return (path / STATE).is_file()


@dataclass
class State:
    """What the experiment directory says: the plan's fingerprint and each finished run."""

    dir: Path
    plan: dict[str, Any]
    fingerprint: str
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def save(self) -> None:
        """Atomically: a reader (or a crash) sees the old state or the new one, never half."""
        data = {"version": VERSION, "fingerprint": self.fingerprint, "plan": self.plan,
                "runs": self.runs}  # fmt: skip
        path = self.dir / STATE
        temporary = path.with_name(f".{STATE}.{os.getpid()}.tmp")
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)

    def finished(self, run_id: str, *, retry_failed: bool = False) -> bool:
        status = self.runs.get(run_id, {}).get("status")
        return status == DONE or (status == FAILED and not retry_failed)

    def load_plan(self) -> Plan:
        return plan_from_json(self.plan, self.dir / "plan.toml")


def read_state(directory: Path) -> State:
    path = directory / STATE
    if not path.is_file():
        raise NotFound(f"{directory} holds no experiment (no {STATE}); give the --dir that "
                       "`swarm experiment` used")  # fmt: skip
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path} is not an experiment's state file: {exc}") from None
    if data.get("version") != VERSION:
        raise InvalidInput(f"{path}: state version {data.get('version')!r}, expected {VERSION}")
    return State(directory, data["plan"], data["fingerprint"], data.get("runs", {}))


def open_state(directory: Path, plan: Plan) -> State:
    """The directory's state for `plan`: a new one, or the one a run of the same plan left
    (to resume). A directory of another plan is refused: its runs would be mixed."""
    if is_experiment(directory):
        state = read_state(directory)
        if state.fingerprint != plan.fingerprint():
            raise InvalidInput(
                f"{directory} holds an experiment of another plan ({state.plan.get('name')!r}, "
                "or the same plan since changed); give a new --dir, or the plan it was started "
                "with to resume it"
            )
        return state
    directory.mkdir(parents=True, exist_ok=True)
    state = State(directory, plan.to_json(), plan.fingerprint())
    (directory / "plan.toml").write_text(plan.path.read_text(encoding="utf-8"), encoding="utf-8")
    state.save()
    return state
