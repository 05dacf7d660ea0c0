"""`swarm task …`: prepare a task and show what it holds."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import ParamSpec, TypeVar

import click

from swarm.errors import SwarmError
from swarm.tasks.model import load_task
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
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Rebuild (and download again) even if prepared.")
@one_line_errors
def prepare_cmd(path: Path, force: bool) -> None:
    """Build a task's start repository, hidden tests and solution (downloads are cached)."""
    task = prepare_task(path, force=force, say=lambda line: click.echo(f"  {line}", err=True))
    click.echo(f"prepared {task.name} in {task.root}")
    for label, part in [("start", task.start_dir), ("hidden tests", task.hidden_dir)]:
        files = sum(1 for p in part.rglob("*") if p.is_file())
        click.echo(f"  {label}: {part} ({files} files)")
    if task.solution_path is not None:
        click.echo(f"  solution: {task.solution_path} ({len(load_units(task))} units)")
    if task.oracle_path is not None:
        click.echo(f"  oracle: {task.oracle_path}")


@task_group.command("show")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@click.option("--lines", default=8, show_default=True, help="How many goal lines to show.")
@one_line_errors
def show_cmd(path: Path, lines: int) -> None:
    """Show a task's name, budget, goal, units and whether it is prepared."""
    task = load_task(path)
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
