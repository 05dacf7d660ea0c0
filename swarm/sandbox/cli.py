"""`swarm sandbox`: see what an agent sees. `shell RUN WORKER [-- CMD]` opens the sandbox a
worker's sessions get (its backend, checkout, environment and limits) and runs a shell or CMD."""

from __future__ import annotations

import contextlib
import json
import sys
import termios
import tty
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from swarm.errors import InvalidInput, NotFound
from swarm.sandbox import NONE_WARNING, BoxSpec, SandboxLimits, get_sandbox, popen


@click.group("sandbox")
def sandbox_group() -> None:
    """Agents' sandboxes (docs/security.md, "Contained agents")."""


def worker_identity(run_dir: Path, worker: str) -> dict[str, Any]:
    """The worker's saved identity (id, name, token) among the run's worker processes'."""
    known: list[dict[str, Any]] = []
    for path in sorted((run_dir / "workers").glob("identities-*.json")):
        known += json.loads(path.read_text() or "[]")
    for identity in known:
        if identity.get("name") == worker:
            return identity
    names = ", ".join(str(i.get("name")) for i in known) or "none yet"
    raise NotFound(f"no worker {worker!r} in the run at {run_dir} (its workers: {names})")


def worker_box(run_dir: Path, worker: str) -> tuple[str, BoxSpec]:
    """The sandbox backend and box spec of `worker`'s sessions in the run at `run_dir`."""
    from swarm.tasks.environment import task_environment
    from swarm.tasks.model import load_task
    from swarm.tasks.rebuild.oracle import task_oracle
    from swarm.worker.run import read_run_file
    from swarm.worker.runtime import session_box, session_env

    if not (run_dir / "run.toml").is_file():
        raise InvalidInput(
            f"{run_dir} holds no run (no run.toml); give the directory `swarm run` printed"
        )
    saved = read_run_file(run_dir)
    identity = worker_identity(run_dir, worker)
    checkout = run_dir / "workers" / worker
    if not (checkout / ".git").is_dir():
        raise NotFound(f"{worker} has no checkout at {checkout} yet; wait for its first session")
    python_env, image = None, None
    hidden: tuple[Path, ...] = ()
    task = None
    with contextlib.suppress(Exception):  # a task moved away since: the rest still holds
        task = load_task(Path(saved["task"]))
    if task is not None:
        python_env = task_environment(task)  # cached since the run built it
        image = task.environment.image
        program = task_oracle(task)  # a copy of it installed here is masked, as in sessions
        hidden = tuple(Path(p) for p in program.installed) if program else ()
    env = session_env(str(saved["hub_url"]), str(identity["token"]), worker, python_env)
    harness = None
    if saved.get("harness") in ("claude-code", "codex"):  # their CLI is in their box, read-only
        from swarm.harness import get_harness

        harness = get_harness(str(saved["harness"]))
    spec = session_box(
        worker,
        checkout.resolve(),
        env,
        SandboxLimits.from_env(),
        harness,
        python_env=python_env,
        image=image,
        hidden=hidden,
    )
    return str(saved.get("sandbox") or "none"), spec


@contextlib.contextmanager
def raw_terminal() -> Iterator[None]:
    """Keys go to the box's terminal as they are typed (its shell echoes them)."""
    saved = termios.tcgetattr(sys.stdin.fileno())
    try:
        tty.setraw(sys.stdin.fileno())
        yield
    finally:
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)


@sandbox_group.command("shell")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("worker")
@click.argument("command", nargs=-1)
def shell_command(run_dir: Path, worker: str, command: tuple[str, ...]) -> None:
    """Open WORKER's sandbox in the run at RUN_DIR, exactly as its agent's commands run, and
    start a shell there (or run COMMAND, after `--`). Exits with the command's status."""
    backend, spec = worker_box(run_dir.resolve(), worker)
    if backend == "none":
        click.echo(f"warning: {NONE_WARNING}", err=True)
    box = get_sandbox(backend).open(spec)
    interactive = not command
    argv = list(command) or ["bash", "-i"]
    options: dict[str, Any] = {"stdin": None, "stdout": None, "stderr": None}
    terminal = interactive and sys.stdin.isatty() and getattr(box, "wants_tty", False)
    if terminal:
        options["tty"] = True  # a container's exec gets a terminal of its own
    try:
        with raw_terminal() if terminal else contextlib.nullcontext():
            process = popen(box, argv, **options)
            code = process.wait()
    finally:
        box.close()
    sys.exit(code if code >= 0 else 128 - code)


__all__ = ["sandbox_group", "worker_box"]
