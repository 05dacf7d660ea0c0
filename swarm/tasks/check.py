"""`swarm task check`: is a task sound? Its start scores near 0, its reference scores all.

The start (as it is) and the reference (the start with every solution unit applied) are scored
by the real evaluator (a fresh sandbox with no network, the task's environment, canaries). When
both are as expected, the reference's tests are pinned in task.toml's `[check]` (their number,
the counts, the time) and their ids in `check/test-ids.txt`; from then on a scoring that
collects fewer tests is `incomplete`, not a smaller denominator (swarm.evaluation.verdict).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import tomlkit

from swarm.errors import InvalidInput
from swarm.evaluation.evaluate import Checkpoint, evaluate
from swarm.tasks.model import Task, load_task
from swarm.tasks.units import apply_unit, load_units

Say = Callable[[str], None]
START_AT_MOST = 0.1  # "near 0": at most this fraction of the tests pass in the start
IDS_FILE = "check/test-ids.txt"


def _quiet(_line: str) -> None:
    return None


@dataclass(frozen=True)
class CheckResult:
    task: Task
    start: Checkpoint
    reference: Checkpoint
    problems: tuple[str, ...]
    pinned: bool

    @property
    def ok(self) -> bool:
        return not self.problems


def _shown(checkpoint: Checkpoint) -> str:
    if checkpoint.status != "scored":
        reason = checkpoint.reason or "no reason given"
        return reason if reason.startswith(checkpoint.status) else f"{checkpoint.status}: {reason}"
    return f"{checkpoint.passed}/{checkpoint.total} passed ({checkpoint.rate:.1%})"


def check_task(
    path: str | Path,
    *,
    sandbox: str | None = None,
    start_at_most: float = START_AT_MOST,
    pin: bool = True,
    say: Say = _quiet,
) -> CheckResult:
    """Score the start and the reference of the task at `path`; pin [check] when both are as
    expected (and `pin`)."""
    task = load_task(path).require_prepared()
    units = load_units(task)
    if not units:
        raise InvalidInput(
            f"task {task.name!r} has no solution units, so its reference cannot be built; "
            "`swarm task check` needs `solution` in task.toml"
        )
    from swarm.tasks.environment import task_environment

    env = task_environment(task, say=say)
    unpinned = replace(task, check=None)  # the old pins must not judge the new check
    with tempfile.TemporaryDirectory(prefix="swarm-check-") as scratch:
        base = Path(scratch)
        say(f"scoring the start ({task.start_dir})")
        start = evaluate(unpinned, task.start_dir, workdir=base / "eval-start", sandbox=sandbox,
                         python_env=env)  # fmt: skip
        say(f"start: {_shown(start)} in {start.duration:.1f}s")
        reference_dir = base / "reference"
        shutil.copytree(task.start_dir, reference_dir, symlinks=True)
        for unit in units:
            apply_unit(unit, reference_dir)
        say(f"scoring the reference (the start with its {len(units)} solution units applied)")
        reference = evaluate(unpinned, reference_dir, workdir=base / "eval-reference",
                             sandbox=sandbox, python_env=env)  # fmt: skip
        say(f"reference: {_shown(reference)} in {reference.duration:.1f}s")
    problems = []
    if reference.status != "scored" or reference.total == 0:
        hint = (
            "; a test dependency may be missing: import again with --dependency NAME"
            if "did not collect" in (reference.reason or "")
            else ""
        )
        problems.append(f"the reference did not score ({_shown(reference)}){hint}")
    elif reference.passed != reference.total:
        failing = sorted(t for t, o in reference.tests.items() if o in ("failed", "error"))
        shown = ", ".join(failing[:3]) + (f" and {len(failing) - 3} more" if len(failing) > 3
                                          else "")  # fmt: skip
        problems.append(
            f"the reference passes {reference.passed} of {reference.total} tests, not all "
            f"(failing: {shown or 'see the output'})"
        )
    if start.status not in ("scored",):
        problems.append(f"the start did not score ({_shown(start)})")
    elif reference.total and start.passed > start_at_most * reference.total:
        problems.append(
            f"the start already passes {start.passed} of {reference.total} tests (more than "
            f"{start_at_most:.0%}): the stubs leave too much done, or tests pass without the code"
        )
    pinned = False
    if not problems and pin:
        write_check(task, reference, start)
        pinned = True
    return CheckResult(load_task(task.root), start, reference, tuple(problems), pinned)


def write_check(task: Task, reference: Checkpoint, start: Checkpoint) -> None:
    """Pin the reference's tests in task.toml's [check] (other fields and comments kept) and
    their ids in check/test-ids.txt."""
    ids = [t for t in reference.tests if "::" in t]
    file = task.root / IDS_FILE
    file.parent.mkdir(parents=True, exist_ok=True)
    header = f"# The {len(ids)} hidden tests of {task.name}, as the evaluator reports them.\n"
    file.write_text(header + "".join(f"{t}\n" for t in ids), encoding="utf-8")
    toml_file = task.root / "task.toml"
    document = tomlkit.parse(toml_file.read_text(encoding="utf-8"))
    table = document.get("check")
    if not isinstance(table, dict):
        table = tomlkit.table()
        document["check"] = table
    table["tests"] = len(ids)
    table["start_passed"] = start.passed
    table["reference_passed"] = reference.passed
    table["checked_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if "test_ids" not in table:
        table["test_ids"] = IDS_FILE
    toml_file.write_text(tomlkit.dumps(document), encoding="utf-8")
