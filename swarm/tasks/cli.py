"""`swarm task …`: prepare a task and show what it holds."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import ParamSpec, TypeVar

import click

from swarm.errors import SwarmError
from swarm.evaluation.evaluate import Checkpoint
from swarm.sandbox import SANDBOXES, default_sandbox
from swarm.tasks.catalog import Entry, registered, resolve_task_path, task_folders
from swarm.tasks.check import IDS_FILE, START_AT_MOST, CheckResult, check_task
from swarm.tasks.model import Task, load_task, parse_budget
from swarm.tasks.prepare import prepare_task
from swarm.tasks.units import load_units

P = ParamSpec("P")
R = TypeVar("R")


def one_line_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn the project's errors (and OS errors) into one clear line instead of a traceback."""

    @wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except SwarmError as exc:
            raise click.ClickException(exc.message) from None
        except OSError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


@click.group("task")
def task_group() -> None:
    """Prepare and inspect tasks (a directory with task.toml)."""


@task_group.command("prepare")
@click.argument("task_ref", metavar="TASK")
@click.option("--force", is_flag=True, help="Rebuild (and download again) even if prepared.")
@one_line_errors
def prepare_cmd(task_ref: str, force: bool) -> None:
    """Build a task's start repository, hidden tests and solution (downloads are cached).
    TASK: a folder or a registered name."""
    task = prepare_task(
        resolve_task_path(task_ref), force=force, say=lambda line: click.echo(f"  {line}", err=True)
    )
    _describe(task)


def _shown(checkpoint: Checkpoint) -> str:
    if checkpoint.status != "scored":
        reason = checkpoint.reason or "no reason given"
        if reason.startswith(f"{checkpoint.status}: "):
            reason = reason[len(checkpoint.status) + 2 :]
        return f"{checkpoint.status}, not a pass rate: {reason}"
    return f"{checkpoint.passed}/{checkpoint.total} passed ({checkpoint.rate:.1%})"


def _describe(task: Task) -> None:
    click.echo(f"prepared {task.name} in {task.root}")
    for label, part in [("start", task.start_dir), ("hidden tests", task.hidden_dir)]:
        files = sum(1 for p in part.rglob("*") if p.is_file())
        click.echo(f"  {label}: {part} ({files} files)")
    if task.solution_path is not None:
        click.echo(f"  solution: {task.solution_path} ({len(load_units(task))} units)")
    if task.oracle_path is not None:
        click.echo(f"  oracle: {task.oracle_path}")


@task_group.command("import")
@click.argument("source")
@click.argument("dest", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--rev", help="The git revision to import (a git URL's @REV, or a local repository's)."
)
@click.option("--package", help="The package's path in the project (default: found).")
@click.option(
    "--tests", "tests", multiple=True, help="A test folder or file in the project (repeatable)."
)
@click.option("--docs", help="The docs folder in the project (default: docs/ or doc/).")
@click.option(
    "--dependency", "dependencies", multiple=True,
    help="A requirement the tests need besides the project's own (repeatable).",
)  # fmt: skip
@click.option(
    "--version",
    "pin",
    help="debian: the Debian version to use (default: the newest that downloads).",
)
@click.option("--name", help="The task's name (default: the project's or package's).")
@click.option("--budget", default="1h", show_default=True, help="The task's budget.")
@click.option("--force", is_flag=True, help="Import again over a task already in DEST.")
@click.option("--no-check", is_flag=True, help="Do not run `swarm task check` at the end.")
@one_line_errors
def import_cmd(
    source: str,
    dest: Path | None,
    rev: str | None,
    package: str | None,
    tests: tuple[str, ...],
    docs: str | None,
    dependencies: tuple[str, ...],
    pin: str | None,
    name: str | None,
    budget: str,
    force: bool,
    no_check: bool,
) -> None:
    """Make a task in DEST (default: tasks/NAME here) from SOURCE, then check it.

    SOURCE is a Python project: pypi:NAME==VERSION (its sdist), git+URL@REV, or a local folder
    (a git repository's, at --rev); its functions and methods are stubbed, its tests become
    the hidden tests. Or debian:PKG: rebuild the program of a Debian package (the program as
    the oracle, `sw oracle`, its source package's test suite as the hidden tests)."""
    from swarm.tasks.pyimport.importer import ImportOptions, default_dest, import_python

    say = _progress
    dest = dest or default_dest(source, name)
    if source.startswith("debian:"):
        from swarm.tasks.rebuild import import_debian

        python_only = {"--rev": rev, "--package": package, "--tests": tests, "--docs": docs,
                       "--dependency": dependencies}  # fmt: skip
        given = [flag for flag, value in python_only.items() if value]
        if given:
            raise click.UsageError(f"{given[0]} is for Python projects, not debian: sources")
        options = {"version": pin, "name": name}
        import_debian(source, dest, force=force, say=say, **{k: v for k, v in options.items() if v})
    else:
        if pin:
            raise click.UsageError("--version is for debian: sources; write pypi:NAME==VERSION")
        parse_budget(budget)
        opts = ImportOptions(rev=rev, package=package, tests=tests, docs=docs, name=name,
                             dependencies=dependencies, budget=budget, force=force)  # fmt: skip
        import_python(source, dest, opts, say=say)
    task = load_task(dest)
    _describe(task)
    if not no_check and task.solution_path is not None:
        _report_check(check_task(task.root, say=say))


def _progress(line: str) -> None:
    click.echo(f"  {line}", err=True)


def _report_check(result: CheckResult) -> None:
    """Print a check's verdict; exit 1 when the task is not sound."""
    task = result.task
    total = result.reference.total
    click.echo(f"check of {task.name}:")
    click.echo(f"  start:     {_shown(result.start)} (expected near 0)")
    click.echo(f"  reference: {_shown(result.reference)} (expected all)")
    if result.ok:
        where = task.root / "task.toml"
        if result.pinned:
            click.echo(f"  pinned:    {total} hidden tests in {where} [check] and {IDS_FILE}")
        click.echo("verdict: sound (start near 0, reference all)")
        return
    tail = result.reference.output_tail.strip().splitlines()[-15:]
    if tail:
        click.echo("the reference's test output ends with:", err=True)
        for line in tail:
            click.echo(f"  | {line}", err=True)
    for problem in result.problems:
        click.echo(f"  problem:   {problem}")
    click.echo("verdict: NOT sound; [check] left as it was")
    raise SystemExit(1)


@task_group.command("check")
@click.argument("task_ref", metavar="TASK")
@click.option(
    "--sandbox", type=click.Choice(sorted(SANDBOXES)), default=default_sandbox,
    show_default="bwrap on Linux, or SWARM_SANDBOX", help="Where the hidden tests run.",
)  # fmt: skip
@click.option(
    "--start-at-most", type=click.FloatRange(0, 1), default=START_AT_MOST, show_default=True,
    help="The fraction of the tests the start may pass and still be near 0.",
)  # fmt: skip
@one_line_errors
def check_cmd(task_ref: str, sandbox: str, start_at_most: float) -> None:
    """Score TASK's start (expected near 0) and reference (every solution unit applied;
    expected all) with the evaluator, and pin the reference's tests in task.toml's [check].
    TASK is a folder or a registered name (`swarm task list`). Exits 1 when it is not sound."""
    path = resolve_task_path(task_ref)
    _report_check(check_task(path, sandbox=sandbox, start_at_most=start_at_most, say=_progress))


@task_group.command("list")
@one_line_errors
def list_cmd() -> None:
    """The registered tasks: those in SWARM_TASKS_PATH's folders, in tasks/ here and in the
    examples, with their size, hidden tests, units and check."""
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in ("name", "path", "start", "hidden tests", "units", "check"):
        table.add_column(column, justify="right" if column in ("hidden tests", "units") else "left")
    entries = registered()
    for entry in entries:
        row = _row(entry)
        table.add_row(entry.name, _short(entry.path), *row)
    Console(width=200).print(table)
    folders = ", ".join(_short(f) for f in task_folders())
    click.echo(f"{len(entries)} tasks, from {folders}")


def _short(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _row(entry: Entry) -> list[str]:
    task = entry.task
    if task is None:
        return ["broken", "", "", entry.problem or ""]
    if not task.is_prepared:
        check = "not checked" if task.check is None else _check_text(task)
        return ["not prepared (swarm task prepare NAME)", "", "", check]
    files = [p for p in task.start_dir.rglob("*") if p.is_file()]
    lines = sum(_lines(p) for p in files if p.suffix == ".py")
    size = f"{len(files)} files, {lines} py lines"
    tests = str(task.check.tests) if task.check and task.check.tests is not None else "?"
    try:
        units = str(len(load_units(task))) if task.solution_path else "-"
    except SwarmError:
        units = "broken"
    return [size, tests, units, _check_text(task)]


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def _check_text(task: Task) -> str:
    check = task.check
    if check is None:
        return "not checked"
    return (
        f"start {check.start_passed}, reference {check.reference_passed}/{check.tests}"
        f" ({check.checked_at or 'undated'})"
    )


@task_group.command("show")
@click.argument("task_ref", metavar="TASK")
@click.option("--lines", default=8, show_default=True, help="How many goal lines to show.")
@one_line_errors
def show_cmd(task_ref: str, lines: int) -> None:
    """Show a task's name, budget, goal, units and whether it is prepared (TASK: a folder or a
    registered name)."""
    task = load_task(resolve_task_path(task_ref))
    minutes = task.budget_seconds / 60
    click.echo(f"task:     {task.name} ({task.root})")
    click.echo(f"budget:   {minutes:g} min; eval timeout {task.eval_timeout:g}s")
    click.echo(f"eval:     {task.eval_command}")
    if not task.is_prepared:
        click.echo(f"prepared: no ({task.missing()}); run `swarm task prepare {task.root}`")
        return
    click.echo("prepared: yes")
    units = load_units(task)
    click.echo(f"units:    {len(units) if task.solution_path else 'none (real models only)'}")
    if task.oracle_path is not None:
        click.echo(f"oracle:   {task.oracle_path}")
    goal = task.goal_text().splitlines()
    click.echo("goal:")
    for line in goal[:lines]:
        click.echo(f"  {line}")
    if len(goal) > lines:
        click.echo(f"  … ({len(goal) - lines} more lines in {task.goal_path})")
