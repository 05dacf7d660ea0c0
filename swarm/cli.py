"""`swarm`: the command for people. Each command is a thin layer over the library."""

from __future__ import annotations

import importlib
from pathlib import Path

import click

from swarm import __version__
from swarm.config import Settings
from swarm.errors import SwarmError


class SwarmGroup(click.Group):
    """Errors swarm raises on purpose become one line, not a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except SwarmError as exc:
            click.echo(f"swarm: error: {exc.message}", err=True)
            ctx.exit(2)


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
def hub(run_dir: Path | None, database_url: str | None, host: str | None, port: int | None) -> None:
    """Serve the hub: shared context, messages and workspace over HTTP."""
    from swarm.bootstrap import build_runtime
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
    runtime = build_runtime(settings)
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


# Commands of the other parts, registered when their modules are present.
_EXTENSIONS = {
    "task": ("swarm.tasks.cli", "task_group"),
    "eval": ("swarm.evaluation.cli", "eval_command"),
    "worker": ("swarm.worker.cli", "worker_command"),
    "run": ("swarm.worker.run_cli", "run_command"),
    "demo": ("swarm.worker.run_cli", "demo_command"),
    "report": ("swarm.report.cli", "report_command"),
    "export": ("swarm.report.cli", "export_command"),
}

for _name, (_module, _attr) in _EXTENSIONS.items():
    try:
        main.add_command(getattr(importlib.import_module(_module), _attr), _name)
    except ModuleNotFoundError as _exc:
        # Skip a part that is not installed; a missing dependency inside one must not be hidden.
        if not (_exc.name and (_module + ".").startswith(_exc.name + ".")):
            raise
