"""`swarm eval TASK --repo …`: score one commit with the task's hidden tests and print it."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from swarm.evaluation.evaluate import evaluate
from swarm.tasks.cli import one_line_errors
from swarm.tasks.model import load_task


@click.command("eval")
@click.argument("task_path", metavar="TASK", type=click.Path(file_okay=False, path_type=Path))
@click.option("--repo", required=True, help="Path or URL of the shared git repository.")
@click.option("--commit", default="main", show_default=True, help="Branch or commit to score.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The evaluator's own directory (default: a new temporary one).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the checkpoint as JSON.")
@one_line_errors
def eval_command(
    task_path: Path, repo: str, commit: str, workdir: Path | None, as_json: bool
) -> None:
    """Check out COMMIT of the repository and run TASK's hidden tests on it."""
    checkpoint = evaluate(load_task(task_path), repo, commit, workdir)
    if as_json:
        click.echo(json.dumps(asdict(checkpoint)))
        return
    if checkpoint.reason is None:
        score = f"{checkpoint.passed}/{checkpoint.total} passed ({checkpoint.rate:.1%})"
    else:
        score = f"no score: {checkpoint.reason}"
        click.echo(checkpoint.output_tail[-1500:], err=True)
    click.echo(f"{checkpoint.commit[:12]}  {score}  in {checkpoint.duration:.1f}s")
