"""`prepare_task`: build a task's generated parts with the builtin preparer its task.toml names."""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from swarm.errors import InvalidInput
from swarm.tasks.model import PREPARED_STAMP, Task, load_task

Say = Callable[[str], None]

# Imported lazily: a preparer's dependencies are only needed when that task is prepared.
PREPARERS = {
    "inflection": "swarm.tasks.prepare_inflection",
    "commonmark": "swarm.tasks.prepare_commonmark",
    "debian": "swarm.tasks.rebuild.importer",
    "demo": "swarm.tasks.demo",
    "scale": "swarm.tasks.demo",
    "hazard": "swarm.tasks.hazard",
}


class Preparer(Protocol):
    """Writes the generated parts into `root` and returns their top-level names."""

    def __call__(
        self, root: Path, options: Mapping[str, Any], *, force: bool, say: Say
    ) -> list[str]: ...


def _quiet(message: str) -> None:
    del message


def prepare_task(path: str | Path, *, force: bool = False, say: Say = _quiet) -> Task:
    """Prepare the task at `path` (a no-op when already prepared, unless `force`)."""
    task = load_task(path)
    if task.prepare is None:
        say(f"{task.name}: nothing to prepare (no `prepare` in task.toml)")
        return task.require_prepared()
    if task.is_prepared and not force:
        say(f"{task.name}: already prepared (use --force to rebuild)")
        return task
    module_name = PREPARERS.get(task.prepare)
    if module_name is None:
        raise InvalidInput(
            f"{task.root / 'task.toml'}: field 'prepare' is {task.prepare!r}; "
            f"known preparers: {', '.join(sorted(PREPARERS))}"
        )
    preparer: Preparer = getattr(importlib.import_module(module_name), f"prepare_{task.prepare}")
    (task.root / PREPARED_STAMP).unlink(missing_ok=True)
    written = preparer(task.root, task.prepare_options, force=force, say=say)
    write_gitignore(task.root, [*written, PREPARED_STAMP])
    (task.root / PREPARED_STAMP).write_text(f"prepared by {task.prepare}\n", encoding="utf-8")
    return load_task(task.root).require_prepared()


def write_gitignore(root: Path, names: list[str]) -> None:
    """Keep generated (and downloaded, never committed) parts out of git."""
    lines = ["# written by `swarm task prepare`: generated and downloaded parts, never committed"]
    lines += [f"/{name.rstrip('/')}" for name in sorted(set(names))]
    (root / ".gitignore").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_files(base: Path, files: Mapping[str, str | bytes], *, fresh: bool = True) -> None:
    """Write `files` (relative path → content) under `base`, emptying it first when `fresh`."""
    if fresh and base.exists():
        shutil.rmtree(base)
    for relative, content in files.items():
        target = base / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
