"""`swarm`: the command for people. Each command is a thin layer over the library."""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from swarm import __version__
from swarm.errors import NotFound, SwarmError, Unavailable

if TYPE_CHECKING:
    from swarm.config import Settings

T = TypeVar("T")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class SwarmGroup(click.Group):
    """Errors swarm raises on purpose become one line, not a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except SwarmError as exc:
            click.echo(f"swarm: error: {exc.message}", err=True)
            ctx.exit(2)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_EXTENSIONS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _EXTENSIONS and cmd_name not in self.commands:
            command = _load(cmd_name)
            if command is not None:
                self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of commands without importing them (their one-line help is kept here)."""
        rows = {name: command.get_short_help_str(60) for name, command in self.commands.items()}
        rows.update({name: short for name, (_, _, short) in _EXTENSIONS.items()})
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows.items()))


@click.group(cls=SwarmGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="swarm")
def main() -> None:
    """Run a decentralized swarm of coding agents on one goal, and inspect what it did."""


@main.command()
@click.option(
    "--run-dir", type=click.Path(path_type=Path), help="Default: $SWARM_RUN_DIR or runs/default."
)
@click.option("--database-url", help="SQLAlchemy URL; default SQLite (WAL) in the run directory.")
@click.option("--host", default=None, help="Interface to listen on (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default 8765).")
@click.option("--new", is_flag=True, help="Create --run-dir if it does not exist (a new run).")
def hub(
    run_dir: Path | None,
    database_url: str | None,
    host: str | None,
    port: int | None,
    new: bool,
) -> None:
    """Serve the hub: shared context, messages and workspace over HTTP."""
    if run_dir is not None and not run_dir.is_dir() and not new:
        # A mistyped run directory must not silently become a new, empty run.
        raise NotFound(
            f"no run directory at {run_dir}; give an existing one (runs/<task>-<time>), or "
            "add --new to start a new, empty run there"
        )
    from swarm.bootstrap import build_runtime
    from swarm.config import Settings
    from swarm.hub.server import make_server

    overrides: dict[str, object] = {}
    if run_dir:
        overrides["run_dir"] = run_dir
    if database_url:
        overrides["database_url"] = database_url
    if host:
        overrides["host"] = host
    if port:
        overrides["port"] = port
    settings = Settings(**overrides)  # type: ignore[arg-type]
    # One line a record, with its level: `swarm run` forwards the errors outside the run
    # directory (whose disk may be the one that filled up); see swarm.worker.logpipe.
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    runtime = _when_the_database_answers(settings, build_runtime)
    token_at = (
        "$SWARM_OPERATOR_TOKEN" if settings.operator_token else settings.run_dir / "operator.token"
    )
    click.echo(
        f"swarm hub on http://{settings.host}:{settings.port}  "
        f"(database: {runtime.db.safe_url}; operator token in {token_at}; "
        f"dashboard at /dashboard)"
    )
    try:
        make_server(
            runtime, settings.host, settings.port, log_level="info", dedicated_process=True
        ).run()
    finally:
        runtime.close()


def _when_the_database_answers(settings: Settings, build: Callable[[Settings], T]) -> T:
    """Build the runtime, waiting while the database does not answer (a compose stack may
    start the hub before its database is up): one line saying what is wrong and what to do,
    then retries for SWARM_HUB_DATABASE_WAIT seconds (default 300)."""
    wait = float(os.environ.get("SWARM_HUB_DATABASE_WAIT", "300"))
    deadline, said = time.monotonic() + wait, -60.0
    while True:
        try:
            return build(settings)
        except Unavailable as exc:
            if not exc.message.startswith("cannot open the database") or (
                time.monotonic() > deadline
            ):
                raise
            if time.monotonic() - said >= 60:
                first = exc.message.splitlines()[0]
                click.echo(
                    f"swarm hub: {first}; retrying for up to {wait:.0f}s: start the database "
                    "or fix SWARM_DATABASE_URL",
                    err=True,
                )
                said = time.monotonic()
            time.sleep(2)


# Commands of the other parts, imported only when that command runs (or its help is shown), so
# `swarm --help` and each command load only what they need.
_EXTENSIONS = {
    "task": ("swarm.tasks.cli", "task_group", "Prepare and list tasks."),
    "eval": ("swarm.evaluation.cli", "eval_command", "Score a repository's main."),
    "worker": ("swarm.worker.cli", "worker_command", "Run workers of an existing hub's run."),
    "run": ("swarm.worker.run_cli", "run_command", "Run N workers on a task."),
    "demo": ("swarm.worker.run_cli", "demo_command", "A small run with no model."),
    "doctor": ("swarm.worker.control_cli", "doctor_command", "Check what a run needs."),
    "stop": ("swarm.worker.control_cli", "stop_command", "Stop a live run."),
    "report": ("swarm.report.cli", "report_command", "An HTML report of runs."),
    "export": ("swarm.report.cli", "export_command", "One archive of a run."),
    "experiment": ("swarm.experiment.cli", "experiment_command", "Run a plan's grid of runs."),
    "sandbox": ("swarm.sandbox.cli", "sandbox_group", "A worker's sandbox, as its agent sees it."),
}


def _load(name: str) -> click.Command | None:
    module_name, attr, _ = _EXTENSIONS[name]
    try:
        command: click.Command = getattr(importlib.import_module(module_name), attr)
    except ModuleNotFoundError as exc:
        # Skip a part that is not installed; a missing dependency inside one must not be hidden.
        if not (exc.name and (module_name + ".").startswith(exc.name + ".")):
            raise
        return None
    return command
