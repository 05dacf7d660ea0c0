"""A task: a directory with `task.toml`, the goal, the starting repository and the hidden tests."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm.errors import Conflict, InvalidInput, NotFound
from swarm.tasks.tables import TaskCheck, TaskEnvironment, parse_check, parse_environment

TASK_FILE = "task.toml"
PREPARED_STAMP = ".prepared"
# `pytest`, `py.test`, `python -m pytest`, `.venv/bin/pytest` as a word of the eval command.
_PYTEST = re.compile(r"(?:^|[\s/;&|(])(?:py\.test|pytest)(?:$|[\s;&|)])")
_BUDGET = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_KNOWN_KEYS = {
    "name", "goal", "start", "hidden_tests", "eval_command", "eval_timeout", "budget",
    "solution", "oracle", "prepare", "prepare_options", "environment", "check",
}  # fmt: skip


class TaskNotPrepared(Conflict):
    """The task's generated parts (start, hidden tests, …) are not there yet."""

    def __init__(self, task: Task, missing: str) -> None:
        super().__init__(
            f"task {task.name!r} is not prepared ({missing}); "
            f"run `swarm task prepare {task.root}` first"
        )


def parse_budget(text: str | int) -> int:
    """Seconds in a budget such as "90s", "30m", "6h" or "1h30m" (a bare int is seconds)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise InvalidInput(f"budget must be positive, got {text}")
        return text
    value = str(text).strip().lower()
    match = _BUDGET.fullmatch(value)
    if not value or match is None or not any(match.groups()):
        raise InvalidInput(
            f"budget {text!r} is not a duration; write e.g. '90s', '30m', '6h' or '1h30m'"
        )
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise InvalidInput(f"budget {text!r} is zero; give a positive duration")
    return total


@dataclass(frozen=True)
class Task:
    """A loaded task; every path is absolute."""

    name: str
    root: Path
    goal_path: Path
    start_dir: Path
    hidden_dir: Path
    eval_command: str
    eval_timeout: float
    budget_seconds: int
    solution_path: Path | None = None
    oracle_path: Path | None = None
    prepare: str | None = None
    prepare_options: Mapping[str, Any] = field(default_factory=dict)
    environment: TaskEnvironment = field(default_factory=TaskEnvironment)
    check: TaskCheck | None = None  # [check], written by `swarm task check`

    @property
    def uses_pytest(self) -> bool:
        """Whether the eval command runs pytest (then the evaluator isolates it, see
        swarm.evaluation.isolation)."""
        return (
            re.search(r"(?:^|[\s/;&|(])(?:py\.test|pytest)(?:$|[\s;&|)])", self.eval_command)
            is not None
        )

    @property
    def is_prepared(self) -> bool:
        """True when everything the task needs at run time exists on disk."""
        return self.missing() is None

    def missing(self) -> str | None:
        """The first generated part that is missing, or None."""
        needed = [self.goal_path, self.start_dir, self.hidden_dir]
        needed += [p for p in (self.solution_path, self.oracle_path) if p is not None]
        for path in needed:
            if not path.exists():
                return f"{path.relative_to(self.root)} does not exist"
        if self.prepare and not (self.root / PREPARED_STAMP).exists():
            return "its preparation did not finish"
        return None

    def require_prepared(self) -> Task:
        """Return self, or raise TaskNotPrepared naming what is missing."""
        missing = self.missing()
        if missing is None:
            return self
        if self.prepare and (self.root / PREPARED_STAMP).exists():
            # Preparing again would not help: the path in task.toml is wrong.
            raise NotFound(
                f"{self.root / 'task.toml'}: {missing}, yet the task is prepared; "
                "check that path in task.toml"
            )
        raise TaskNotPrepared(self, missing)

    def goal_text(self) -> str:
        """The goal shown to every worker."""
        self.require_prepared()
        return self.goal_path.read_text(encoding="utf-8")

    def render_eval_command(self, python: str = "python", hidden: Path | None = None) -> str:
        """The eval command with `{hidden}` (the hidden tests, or the copy at `hidden`),
        `{task}`, `{oracle}` and `{python}` filled in."""
        return self.eval_command.format(
            hidden=hidden or self.hidden_dir,
            task=self.root,
            oracle=self.oracle_path or "",
            python=python,
        )


def load_task(path: str | Path) -> Task:
    """Load `task.toml` from a task directory (or the file itself); clear errors name the field."""
    path = Path(path).expanduser().resolve()
    file = path if path.is_file() else path / TASK_FILE
    if not file.is_file():
        raise NotFound(f"no task at {path}: {file} does not exist")
    root = file.parent
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{file} is not valid TOML: {exc}") from None

    def fail(key: str, why: str) -> InvalidInput:
        return InvalidInput(f"{file}: field {key!r} {why}")

    unknown = sorted(set(data) - _KNOWN_KEYS)
    if unknown:
        raise fail(unknown[0], f"is not a task field (known: {', '.join(sorted(_KNOWN_KEYS))})")

    def text(key: str, default: str | None = None) -> str | None:
        value = data.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise fail(key, "must be a non-empty string")
        return value

    def inside(key: str, default: str | None = None) -> Path | None:
        value = text(key, default)
        if value is None:
            return None
        return within(key, value)

    def within(key: str, value: str) -> Path:
        if Path(value).is_absolute():
            raise fail(key, f"must be a path relative to the task directory, got {value!r}")
        resolved = (root / value).resolve()
        if not resolved.is_relative_to(root):
            raise fail(key, f"points outside the task directory: {value!r}")
        return resolved

    name = text("name")
    if name is None:
        raise fail("name", "is required")
    command = text("eval_command")
    if command is None:
        raise fail("eval_command", "is required (the command that scores the hidden tests)")
    try:
        command.format(hidden="", task="", oracle="", python="")
    except (KeyError, IndexError, ValueError) as exc:
        raise fail("eval_command", f"has an unknown placeholder {exc}; use {{hidden}}") from None
    timeout = data.get("eval_timeout", 300)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise fail("eval_timeout", f"must be a positive number of seconds, got {timeout!r}")
    budget = data.get("budget", "30m")
    if not isinstance(budget, str | int):
        raise fail("budget", f"must be a duration such as '30m', got {budget!r}")
    try:
        budget_seconds = parse_budget(budget)
    except InvalidInput as exc:
        raise InvalidInput(f"{file}: field 'budget': {exc.message}") from None
    options = data.get("prepare_options", {})
    if not isinstance(options, dict):
        raise fail("prepare_options", "must be a table")
    start, hidden = inside("start", "start"), inside("hidden_tests", "hidden")
    assert start is not None and hidden is not None
    if hidden.is_relative_to(start):
        raise fail("hidden_tests", "is inside `start`, so workers would see the hidden tests")
    task = Task(
        name=name,
        root=root,
        goal_path=inside("goal", "goal.md") or root / "goal.md",
        start_dir=start,
        hidden_dir=hidden,
        eval_command=command,
        eval_timeout=float(timeout),
        budget_seconds=budget_seconds,
        solution_path=inside("solution"),
        oracle_path=inside("oracle"),
        prepare=text("prepare"),
        prepare_options=options,
        environment=parse_environment(data, fail),
        check=parse_check(data, fail, within),
    )
    if task.prepare is None and task.missing() is not None:
        raise NotFound(f"{file}: {task.missing()} (and the task has no `prepare` to build it)")
    return task
