"""`swarm worker`: run one or many workers (threads) of a run in this process."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import click

from swarm.errors import InvalidInput
from swarm.harness import SessionLimits
from swarm.sandbox import NONE_WARNING, SANDBOXES, SandboxLimits, default_sandbox, get_sandbox
from swarm.switches import parse_without
from swarm.tasks.environment import ensure_environment, task_requirements
from swarm.tasks.model import load_task
from swarm.tasks.rebuild.oracle import task_oracle
from swarm.tasks.tables import TaskEnvironment
from swarm.tools.client import HubClient, HubError
from swarm.worker.runtime import HeartbeatPump, IdentityFile, WorkerOptions, WorkerRuntime


def _be_nice() -> None:
    """Workers yield the CPU to the hub (SWARM_WORKER_NICE, default 10; 0: no change). On one
    machine with 1,024 simulated workers the hub is everyone's bottleneck: at equal priority
    it got a small share among a thousand worker threads and their git processes (which
    inherit the niceness), and every worker waited on it. Model-backed workers mostly wait on
    the model and lose nothing."""
    raw = os.environ.get("SWARM_WORKER_NICE", "10")
    try:
        increment = int(raw)
    except ValueError:
        raise click.UsageError(
            f"SWARM_WORKER_NICE={raw!r} is not a whole number; use e.g. 10, or 0 for no change"
        ) from None
    if increment > 0:
        try:
            os.nice(increment)
        except OSError as exc:  # a sandbox may refuse; the workers still run, just not nicer
            logging.getLogger("swarm.worker").warning("could not lower priority: %s", exc)


def published_environment(published: dict[str, Any]) -> TaskEnvironment:
    """The task's [environment] as the hub published it (none from an older hub)."""
    raw = published.get("environment") or {}
    return TaskEnvironment(
        raw.get("python"), tuple(raw.get("dependencies") or ()), raw.get("image")
    )


def fetch_task(hub_url: str, join_token: str) -> dict[str, Any]:
    """The run's task from the hub, waiting while the hub starts (a container may come first)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            with HubClient(hub_url, join_token) as client:
                result: dict[str, Any] = client.call("GET", "/v1/task")["result"]
                return result
        except HubError as exc:
            if exc.status in (401, 403):
                raise click.ClickException(
                    f"the hub at {hub_url} refused the join token ({exc}); set SWARM_JOIN_TOKEN "
                    "to the hub's join token"
                ) from None
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"could not get the task from the hub at {hub_url}: {exc}"
                ) from None
        time.sleep(2)


@click.command()
@click.option("--hub", "hub_url", envvar="SWARM_HUB_URL", required=True, help="The hub's URL.")
@click.option(
    "--join-token",
    envvar="SWARM_JOIN_TOKEN",
    required=True,
    help="Token that lets workers register (default env SWARM_JOIN_TOKEN).",
)
@click.option(
    "--task",
    "task_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The task directory (goal, solution for sim); default: ask the hub (GET /v1/task).",
)
@click.option(
    "--count",
    type=click.IntRange(1, 4096),
    default=1,
    show_default=True,
    envvar="SWARM_WORKER_COUNT",
    help="Workers in this process (threads) (env SWARM_WORKER_COUNT).",
)
@click.option(
    "--harness",
    envvar="SWARM_HARNESS",
    help="sim, mini, claude-code or codex (env SWARM_HARNESS); default: the hub's run, else sim.",
)
@click.option(
    "--model", envvar="SWARM_MODEL", help="A litellm model string, e.g. openai/gpt-4.1-mini."
)
@click.option(
    "--model-mix",
    envvar="SWARM_MODEL_MIX",
    help="e.g. 'strong/model:0.25,cheap/model:0.75', by worker id.",
)
@click.option(
    "--api-base",
    envvar="SWARM_API_BASE",
    help="OpenAI-compatible server URL (vLLM, Ollama, llama.cpp).",
)
@click.option(
    "--team-size", type=int, default=None, help="Workers in the whole run (default: the hub's)."
)
@click.option("--deadline", type=float, default=float("inf"), help="Unix time the budget ends.")
@click.option(
    "--workdir-root", type=click.Path(path_type=Path), default=Path("workers"), show_default=True
)
@click.option(
    "--think",
    type=float,
    default=1.0,
    show_default=True,
    help="Simulated harness: seconds a unit takes to 'think'.",
)
@click.option("--max-steps", type=int, default=100, show_default=True, help="Steps per session.")
@click.option("--session-seconds", type=float, default=1800.0, show_default=True)
@click.option("--session-cost", type=float, default=0.0, help="Dollars per session (0: none).")
@click.option("--required-approvals", type=int, default=0)
@click.option(
    "--identities",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A file keeping this process's worker identities: a restarted process (or a resumed "
    "run) takes them up again instead of registering new workers.",
)
@click.option(
    "--sandbox",
    type=click.Choice(sorted(SANDBOXES)),
    envvar="SWARM_SANDBOX",
    default=default_sandbox,
    show_default="bwrap on Linux",
    help="Where agents' commands run (docs/security.md); `none` only for agents you trust.",
)
@click.option(
    "--without",
    envvar="SWARM_WITHOUT",
    help="The run's switches (comma separated), checked against the hub's: a worker told "
    "otherwise refuses to start. Default: whatever the hub runs without.",
)
def worker_command(
    hub_url: str,
    join_token: str,
    task_dir: Path | None,
    count: int,
    harness: str | None,
    model: str | None,
    model_mix: str | None,
    api_base: str | None,
    team_size: int | None,
    deadline: float,
    workdir_root: Path,
    think: float,
    max_steps: int,
    session_seconds: float,
    session_cost: float,
    required_approvals: int,
    identities: Path | None,
    sandbox: str,
    without: str | None,
) -> None:
    """Register COUNT workers with the hub and run their sessions until the budget ends."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per call is 100k+ lines
    if task_dir is not None:
        task = load_task(task_dir)
        goal, solution = task.goal_text(), task.solution_path
        task_name, oracle = task.name, task.oracle_path.name if task.oracle_path else None
        program = task_oracle(task)
        conceal = list(program.installed) if program else []
        harness = harness or "sim"
        environment = TaskEnvironment(
            task.environment.python,
            task_requirements(task) if not task.environment.is_default else (),
            task.environment.image,
        )
    else:
        published = fetch_task(hub_url, join_token)
        goal, task_name, oracle = published["goal"], published["name"], published.get("oracle")
        conceal = list(published.get("conceal") or [])
        environment = published_environment(published)
        harness = harness or published.get("harness") or "sim"
        team_size = team_size or published.get("team_size")
        solution = None
        if published.get("solution"):
            workdir_root.mkdir(parents=True, exist_ok=True)
            solution = workdir_root / "solution.json"
            solution.write_text(published["solution"], encoding="utf-8")
    try:
        switches = parse_without(without) if without is not None else None
    except InvalidInput as exc:
        raise click.BadParameter(exc.message, param_hint="--without") from None
    if sandbox == "none":
        logging.getLogger("swarm.worker").warning(NONE_WARNING)
    get_sandbox(sandbox)  # a missing backend is a clear error now, not one per session
    SandboxLimits.from_env()  # and so is a bad SWARM_SANDBOX_* limit
    # Built once per machine and cached (`swarm run` built it already): agents' python.
    python_env = ensure_environment(environment)
    stop = threading.Event()
    _be_nice()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()  # finish the current step, release claims, report stopped

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    options: dict[str, Any] = {}
    if harness == "sim":
        options = {
            "solution": solution,
            "task_name": task_name,
            "think": think,
            "team_size": team_size or count,
            # Each attempt of the switch-aware policy, for the measures (swarm.report).
            "attempts_dir": workdir_root.resolve() / "attempts",
        }
    # Each session's transcript (mini's trajectory, a CLI's output, the sim's steps) goes here,
    # where the dashboard reads it.
    options["log_dir"] = workdir_root.resolve() / "sessions"
    kept = IdentityFile(identities) if identities else None
    runtimes = []
    for index in range(count):
        runtimes.append(
            WorkerRuntime(
                WorkerOptions(
                    hub_url=hub_url,
                    join_token=join_token,
                    workdir_root=workdir_root.resolve(),
                    goal=goal,
                    team_size=team_size or count,
                    harness=harness,
                    harness_options=options,
                    model=model,
                    model_mix=model_mix,
                    api_base=api_base,
                    deadline=deadline,
                    limits=SessionLimits(
                        max_steps=max_steps, max_cost=session_cost, max_seconds=session_seconds
                    ),
                    oracle=oracle,
                    conceal=tuple(conceal),
                    required_approvals=required_approvals,
                    sandbox=sandbox,
                    identity=kept.get(index) if kept else None,
                    python_env=python_env,
                    image=environment.image,
                    without=switches,
                ),
                stop=stop,
                on_registered=kept.add if kept else None,
            )
        )
    # A third of the hub's dead-after time (30 s by default) or less, or live workers die.
    beat = float(os.environ.get("SWARM_HEARTBEAT_SECONDS", "10"))
    pump = HeartbeatPump(runtimes, interval=beat).start()
    failures: list[BaseException] = []

    def run_one(runtime: WorkerRuntime) -> None:
        try:
            runtime.run()
        except BaseException as exc:
            failures.append(exc)
            logging.getLogger("swarm.worker").exception("worker %s stopped", runtime.name)

    threads = [
        threading.Thread(target=run_one, args=(r,), name=f"worker-{i}")
        for i, r in enumerate(runtimes)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=0.5)
    pump.stop()
    if failures and len(failures) == len(runtimes):
        click.echo(f"swarm worker: every worker failed; first error: {failures[0]}", err=True)
        sys.exit(1)
