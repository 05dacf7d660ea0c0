"""`swarm eval TASK --repo …`: score one commit with the task's hidden tests and print it."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import click

from swarm.evaluation.evaluate import evaluate
from swarm.sandbox import NONE_WARNING, SANDBOXES, default_sandbox
from swarm.tasks.catalog import resolve_task_path
from swarm.tasks.cli import one_line_errors
from swarm.tasks.environment import task_environment
from swarm.tasks.model import load_task


@click.command("eval")
@click.argument(
    "task_path",
    metavar="TASK",
    envvar="SWARM_TASK_DIR",
    type=click.Path(file_okay=False, path_type=Path),
)
@click.option(
    "--repo",
    required=True,
    envvar="SWARM_EVAL_REPO",
    help="What to score: a git repository (path or URL) or a plain folder.",
)
@click.option("--commit", default="main", show_default=True, help="Branch or commit to score.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The evaluator's own directory (default: a new temporary one).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the checkpoint as JSON.")
@click.option(
    "--sandbox",
    type=click.Choice(sorted(SANDBOXES)),
    default=default_sandbox,
    show_default="bwrap on Linux, or SWARM_SANDBOX",
    help="Where the hidden tests run; `none` runs them unconfined.",
)
@click.option(
    "--hub",
    "hub_url",
    envvar="SWARM_HUB_URL",
    help="Keep scoring main and record each score with this hub (needs SWARM_OPERATOR_TOKEN).",
)
@click.option(
    "--every",
    type=click.FloatRange(1),
    default=600.0,
    envvar="SWARM_EVAL_EVERY",
    show_default=True,
    help="With --hub: seconds between scores besides the one after each merge.",
)
@one_line_errors
def eval_command(
    task_path: Path,
    repo: str,
    commit: str,
    workdir: Path | None,
    as_json: bool,
    hub_url: str | None,
    every: float,
    sandbox: str,
) -> None:
    """Score COMMIT of the repository (or a plain folder as it is) with TASK's hidden tests, in
    a fresh sandbox with no network (TASK: a folder or a registered name; default env
    SWARM_TASK_DIR). With --hub, go on scoring main after each merge and every --every seconds
    until stopped. Exits 2 when the scoring was tampered with or incomplete."""
    if Path(repo).exists():  # a local path, relative to here
        repo = str(Path(repo).resolve())
    if workdir is not None:
        workdir = workdir.resolve()
    if sandbox == "none":
        click.echo(f"warning: {NONE_WARNING.replace('agent sessions', 'the hidden tests')}",
                   err=True)  # fmt: skip
    task = load_task(resolve_task_path(task_path))
    python_env = task_environment(task, say=lambda line: click.echo(line, err=True))
    if hub_url:
        token = os.environ.get("SWARM_OPERATOR_TOKEN")
        if not token:
            raise click.UsageError(
                "--hub records scores with the operator token: set it in SWARM_OPERATOR_TOKEN"
            )
        from swarm.evaluation.follow import follow

        where = workdir or Path("eval").resolve()
        follow(task, repo, hub_url, token, where, every, sandbox=sandbox, python_env=python_env)
        return
    checkpoint = evaluate(task, repo, commit, workdir, sandbox=sandbox, python_env=python_env)
    if as_json:
        click.echo(json.dumps(asdict(checkpoint)))
        return
    if checkpoint.status == "scored":
        score = f"{checkpoint.passed}/{checkpoint.total} passed ({checkpoint.rate:.1%})"
    else:
        score = f"{checkpoint.status}, not a pass rate: {checkpoint.reason}"
        click.echo(checkpoint.output_tail[-1500:], err=True)
    click.echo(f"{checkpoint.commit[:12]}  {score}  in {checkpoint.duration:.1f}s")
    if checkpoint.status in ("tampered", "incomplete"):
        raise SystemExit(2)
