"""The task registry: the tasks `swarm task list` shows and `swarm run NAME` finds by name.

Tasks are looked for, in this order, in the folders of `SWARM_TASKS_PATH` (separated by `:`),
in `tasks/` of the current directory (where `swarm task import` puts a task without DEST), and
in the project's `examples/tasks/`. Each task is a folder of one of them holding `task.toml`;
the first task of a name wins.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from swarm.errors import NotFound, SwarmError
from swarm.tasks.model import TASK_FILE, Task, load_task

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def task_folders() -> list[Path]:
    """The folders that hold registered tasks, in the order names are looked up."""
    folders = [Path(p).expanduser() for p in os.environ.get("SWARM_TASKS_PATH", "").split(":") if p]
    folders += [Path.cwd() / "tasks", EXAMPLES]
    seen: list[Path] = []
    for folder in folders:
        resolved = folder.resolve()
        if resolved not in seen:
            seen.append(resolved)
    return seen


@dataclass(frozen=True)
class Entry:
    """One registered task, as the list shows it (`task` is None when it does not load)."""

    name: str
    path: Path
    task: Task | None
    problem: str | None = None


def _name_of(folder: Path) -> str:
    try:
        data = tomllib.loads((folder / TASK_FILE).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return folder.name
    name = data.get("name")
    return name if isinstance(name, str) and name.strip() else folder.name


def registered() -> list[Entry]:
    """Every task of the registry's folders (the first of each name), sorted by name."""
    entries: dict[str, Entry] = {}
    for folder in task_folders():
        if not folder.is_dir():
            continue
        for child in sorted(folder.iterdir()):
            if not (child / TASK_FILE).is_file():
                continue
            name = _name_of(child)
            if name in entries:
                continue
            try:
                entries[name] = Entry(name, child, load_task(child))
            except SwarmError as exc:
                entries[name] = Entry(name, child, None, exc.message)
    return sorted(entries.values(), key=lambda e: e.name)


def resolve_task_path(name_or_path: str | Path) -> Path:
    """A task's folder: `name_or_path` itself when it is a folder (or task.toml), else the
    registered task of that name; NotFound names the registered ones."""
    path = Path(name_or_path).expanduser()
    if path.exists():
        return path
    text = str(name_or_path)
    if "/" in text or text.startswith("."):
        raise NotFound(f"no task at {path}: {path} does not exist")
    for folder in task_folders():
        if not folder.is_dir():
            continue
        for child in sorted(folder.iterdir()):
            if (child / TASK_FILE).is_file() and text in (_name_of(child), child.name):
                return child
    known = ", ".join(e.name for e in registered()) or "none"
    raise NotFound(
        f"no task {text!r}: no such folder, and no registered task has that name (registered: "
        f"{known}); see `swarm task list`"
    )
