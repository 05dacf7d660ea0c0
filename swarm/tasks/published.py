"""What of a task the hub hands to workers: the goal, and for a `sim` run its solution units.

Whoever sets a run up (`swarm run`, the compose `bootstrap`) writes `<run_dir>/task.json`; the
hub serves it at `GET /v1/task`, so a worker needs only the hub's URL and the join token. The
hidden tests never go in: they stay with the evaluator. A task's oracle is copied into
`<run_dir>/oracle/`, where the hub runs it for `sw oracle`; task.json only names the program.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from swarm.errors import Unavailable
from swarm.tasks.environment import task_requirements
from swarm.tasks.model import Task
from swarm.tasks.rebuild.oracle import publish_oracle

FILE = "task.json"


def publish_task(task: Task, run_dir: Path, *, harness: str, team_size: int) -> Path:
    """Write the worker-visible part of `task` into `run_dir` (replacing an earlier one)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    oracle = publish_oracle(task, run_dir)
    published = {
        "name": task.name,
        "goal": task.goal_text(),
        "harness": harness,
        "team_size": team_size,
        # Only a sim run gets the solution: a model-backed worker must not be handed the answer.
        "solution": task.solution_path.read_text(encoding="utf-8")
        if harness == "sim" and task.solution_path
        else None,
        # What the agents' commands run with ([environment]); each worker builds it once.
        "environment": {
            "python": task.environment.python,
            "dependencies": list(task_requirements(task))
            if not task.environment.is_default
            else [],
            "image": task.environment.image,
        },
        # The program's name when workers may run it (`sw oracle`), never where it is.
        "oracle": oracle.program if oracle else None,
        # System paths of the program's packages, masked in agents' sandboxes where the
        # machine has them installed.
        "conceal": list(oracle.installed) if oracle else [],
    }
    path = run_dir / FILE
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(published), encoding="utf-8")
    os.replace(temporary, path)  # a hub reading it meanwhile sees the old or the new, whole
    return path


def read_published(run_dir: Path) -> dict[str, Any]:
    path = run_dir / FILE
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise Unavailable(
            f"this hub has no task yet ({path} is missing): the run's set-up (`swarm run`, or "
            "the compose `bootstrap` service) writes it; start that first"
        ) from None
    return data
