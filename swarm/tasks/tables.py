"""The optional tables of `task.toml`: `[environment]` (what the hidden tests and the agents run
with) and `[check]` (what `swarm task check` found the reference to collect; the evaluator pins
its scorings to it)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarm.errors import InvalidInput

ENVIRONMENT_KEYS = ("python", "dependencies", "image")
CHECK_KEYS = ("tests", "test_ids", "start_passed", "reference_passed", "checked_at")
# "3.11", "3" or "3.12.1": the version of an interpreter found on PATH as python3.11.
_VERSION = re.compile(r"\d+(?:\.\d+){0,2}")
# A requirement string's start: a distribution name (PEP 508); pip validates the rest.
_REQUIREMENT = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9._,\s-]*\])?\s*(?:[<>=!~;@(\s]|$)"
)
_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:@-]{0,254}")


@dataclass(frozen=True)
class TaskEnvironment:
    """`[environment]`: the interpreter and packages the hidden tests and the agents' commands
    run with. The default (no table) is the Python running swarm, with its packages."""

    python: str | None = None  # "3.11" (python3.11 on PATH) or an absolute path
    dependencies: tuple[str, ...] = ()  # pip requirement strings
    image: str | None = None  # the container image of the docker sandbox for this task

    @property
    def is_default(self) -> bool:
        """True when the task asks for no environment of its own (the venv part)."""
        return self.python is None and not self.dependencies


@dataclass(frozen=True)
class TaskCheck:
    """`[check]`: what the reference collects and scores, as `swarm task check` recorded it."""

    tests: int | None = None  # hidden tests the reference collects
    test_ids: Path | None = None  # absolute; one test id per line
    start_passed: int | None = None
    reference_passed: int | None = None
    checked_at: str | None = None

    def pinned_ids(self) -> list[str]:
        """The test ids of `test_ids` (blank lines and `#` comments skipped); [] without one."""
        if self.test_ids is None:
            return []
        try:
            lines = self.test_ids.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise InvalidInput(
                f"[check].test_ids: cannot read {self.test_ids}: {exc.strerror}; run "
                "`swarm task check` again or fix the path"
            ) from None
        return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]


Fail = Callable[[str, str], InvalidInput]


def _table(data: Mapping[str, Any], name: str, keys: tuple[str, ...], fail: Fail) -> dict[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise fail(name, "must be a table ([" + name + "])")
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise fail(f"{name}.{unknown[0]}", f"is not a field of [{name}] (known: {', '.join(keys)})")
    return table


def parse_environment(data: Mapping[str, Any], fail: Fail) -> TaskEnvironment:
    """`[environment]` from the parsed task.toml; `fail(key, why)` makes the error."""
    table = _table(data, "environment", ENVIRONMENT_KEYS, fail)
    python = table.get("python")
    version_or_path = isinstance(python, str) and (
        _VERSION.fullmatch(python) is not None or Path(python).is_absolute()
    )
    if python is not None and not version_or_path:
        raise fail(
            "environment.python",
            f"must be a version such as '3.11' or an absolute path, got {python!r}",
        )
    deps = table.get("dependencies", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) and d.strip() for d in deps):
        raise fail(
            "environment.dependencies",
            f"must be a list of pip requirement strings such as ['attrs>=23.1'], got {deps!r}",
        )
    for dep in deps:
        if dep.strip().startswith("-") or not _REQUIREMENT.match(dep.strip()):
            raise fail(
                "environment.dependencies",
                f"holds {dep!r}, which is not a requirement (a name with an optional version, "
                "e.g. 'attrs>=23.1'; pip options are not allowed)",
            )
    image = table.get("image")
    if image is not None and (not isinstance(image, str) or not _IMAGE.fullmatch(image)):
        raise fail(
            "environment.image", f"must be an image name such as 'swarm:local', got {image!r}"
        )
    return TaskEnvironment(python, tuple(d.strip() for d in deps), image)


def parse_check(
    data: Mapping[str, Any], fail: Fail, inside: Callable[[str, str], Path]
) -> TaskCheck | None:
    """`[check]` from the parsed task.toml, or None without one. `inside(key, value)` resolves
    a path relative to the task directory (refusing one that leaves it)."""
    if "check" not in data:
        return None
    table = _table(data, "check", CHECK_KEYS, fail)
    counts: dict[str, int | None] = {}
    for key in ("tests", "start_passed", "reference_passed"):
        value = table.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise fail(f"check.{key}", f"must be a whole number >= 0, got {value!r}")
        counts[key] = value
    tests = counts["tests"]
    for key in ("start_passed", "reference_passed"):
        value = counts[key]
        if value is not None and tests is not None and value > tests:
            raise fail(f"check.{key}", f"is {value}, more than check.tests ({tests})")
    ids_value = table.get("test_ids")
    test_ids = None
    if ids_value is not None:
        if not isinstance(ids_value, str) or not ids_value.strip():
            raise fail("check.test_ids", "must be a path relative to the task directory")
        test_ids = inside("check.test_ids", ids_value)
        if not test_ids.is_file():
            raise fail("check.test_ids", f"names {ids_value!r}, which does not exist")
    checked_at = table.get("checked_at")
    if checked_at is not None and not isinstance(checked_at, str):
        checked_at = str(checked_at)  # TOML's own datetime: kept as written
    check = TaskCheck(
        tests, test_ids, counts["start_passed"], counts["reference_passed"], checked_at
    )
    if test_ids is not None and tests is not None:
        listed = len(check.pinned_ids())
        if listed != tests:
            raise fail("check.test_ids", f"lists {listed} test ids, but check.tests is {tests}")
    return check
