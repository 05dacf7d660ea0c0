"""Solution units: independent, replayable edits that together solve a task."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from swarm.context import scope as scopes
from swarm.errors import Conflict, InvalidInput, NotFound
from swarm.tasks.model import Task

MIN_GAP_LINES = 3  # unchanged lines between two units' edits, so git merges never conflict


@dataclass(frozen=True)
class Edit:
    """Replace the one exact occurrence of `old` in `path` by `new`; an empty `old` creates
    `path` (which must not exist yet) holding `new`."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Unit:
    """One independent piece of the solution."""

    id: str
    title: str
    scope: tuple[str, ...]
    edits: tuple[Edit, ...]


class UnitAlreadyApplied(Conflict):
    """Every edit of the unit is already in the checkout (e.g. another worker merged it)."""


class UnitDoesNotApply(Conflict):
    """An edit's `old` text is not found exactly once and its `new` text is not there either."""


def load_units(task: Task) -> list[Unit]:
    """The task's solution units, or [] when the task has none."""
    if task.solution_path is None:
        return []
    task.require_prepared()
    return parse_units(task.solution_path.read_text(encoding="utf-8"), str(task.solution_path))


def parse_units(text: str, source: str = "units.json") -> list[Unit]:
    """Parse and validate a units JSON document."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{source} is not valid JSON: {exc}") from None
    if not isinstance(raw, list):
        raise InvalidInput(f"{source} must hold a list of units")
    units: list[Unit] = []
    for index, item in enumerate(raw):
        where = f"{source}: unit #{index}"
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise InvalidInput(f"{where} must be an object with a string 'id'")
        edits = item.get("edits")
        if not isinstance(edits, list) or not edits:
            raise InvalidInput(f"{where} ({item['id']}) needs a non-empty 'edits' list")
        parsed: list[Edit] = []
        for edit in edits:
            if not isinstance(edit, dict) or not all(
                isinstance(edit.get(k), str) for k in ("path", "old", "new")
            ):
                raise InvalidInput(f"{where} ({item['id']}): each edit needs path, old and new")
            parsed.append(Edit(edit["path"], edit["old"], edit["new"]))
        try:  # what the sim claims for the unit: paths, or the symbols it writes (a.py::f)
            scope = scopes.normalize(item.get("scope", sorted({e.path for e in parsed})))
        except InvalidInput as exc:
            raise InvalidInput(f"{where} ({item['id']}): {exc.message}") from None
        units.append(
            Unit(item["id"], str(item.get("title", item["id"])), tuple(scope), tuple(parsed))
        )
    if len({u.id for u in units}) != len(units):
        raise InvalidInput(f"{source}: unit ids must be unique")
    return units


def dump_units(units: list[Unit]) -> str:
    """Serialise units to the JSON format `parse_units` reads."""
    return json.dumps(
        [
            {
                "id": u.id,
                "title": u.title,
                "scope": list(u.scope),
                "edits": [{"path": e.path, "old": e.old, "new": e.new} for e in u.edits],
            }
            for u in units
        ],
        indent=1,
    )


def apply_unit(unit: Unit, checkout_dir: str | Path) -> list[str]:
    """Apply a unit's edits in a checkout; returns the paths changed.

    Raises UnitAlreadyApplied when every edit is already there, UnitDoesNotApply otherwise.
    Nothing is written unless every edit applies.
    """
    root = Path(checkout_dir)
    pending: dict[Path, str] = {}
    applied = 0
    for edit in unit.edits:
        file = (root / edit.path).resolve()
        if not file.is_relative_to(root.resolve()):
            raise InvalidInput(f"unit {unit.id}: path {edit.path!r} leaves the checkout")
        if not edit.old:  # a new file
            current = pending.get(file)
            if current is None and file.is_file():
                current = file.read_text(encoding="utf-8")
            if current is None:
                pending[file] = edit.new
            elif current == edit.new:
                applied += 1
            else:
                raise UnitDoesNotApply(
                    f"unit {unit.id}: {edit.path} should be a new file, but it exists with "
                    "other content; the file was made by something else"
                )
            continue
        if file not in pending:
            if not file.is_file():
                raise NotFound(f"unit {unit.id}: {edit.path} does not exist in {root}")
            pending[file] = file.read_text(encoding="utf-8")
        content = pending[file]
        count = content.count(edit.old)
        if count == 1:
            pending[file] = content.replace(edit.old, edit.new, 1)
        elif edit.new in content:
            applied += 1
        else:
            found = "not found" if count == 0 else f"found {count} times"
            raise UnitDoesNotApply(
                f"unit {unit.id}: the text to replace in {edit.path} is {found} "
                "(expected exactly once); the file was changed by something else"
            )
    if applied == len(unit.edits):
        raise UnitAlreadyApplied(f"unit {unit.id} is already applied in {root}")
    for file, content in pending.items():
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(content, encoding="utf-8")
    return sorted({e.path for e in unit.edits})


def changed_lines(old_text: str, edit: Edit) -> range:
    """The 0-based line range of `old_text` that `edit` replaces."""
    start = old_text.index(edit.old)
    first = old_text.count("\n", 0, start)
    return range(first, first + edit.old.count("\n") + 1)


def check_independent(units: list[Unit], start_dir: Path) -> None:
    """Raise InvalidInput unless every two units' edits are MIN_GAP_LINES apart in the start."""
    spans: dict[str, list[tuple[range, str]]] = {}
    created: dict[str, str] = {}
    for unit in units:
        for edit in unit.edits:
            if not edit.old:
                if (start_dir / edit.path).exists() or created.get(edit.path, unit.id) != unit.id:
                    raise InvalidInput(
                        f"unit {unit.id}: it creates {edit.path}, which the start or another "
                        "unit already has"
                    )
                created[edit.path] = unit.id
                continue
            text = (start_dir / edit.path).read_text(encoding="utf-8")
            if text.count(edit.old) != 1:
                raise InvalidInput(f"unit {unit.id}: its text is not exactly once in {edit.path}")
            spans.setdefault(edit.path, []).append((changed_lines(text, edit), unit.id))
    for path, found in spans.items():
        found.sort(key=lambda item: item[0].start)
        for (a, a_id), (b, b_id) in itertools.pairwise(found):
            if a_id != b_id and b.start - a.stop < MIN_GAP_LINES:
                raise InvalidInput(
                    f"units {a_id} and {b_id} edit {path} less than {MIN_GAP_LINES} lines apart"
                )
