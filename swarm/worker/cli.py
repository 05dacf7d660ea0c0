"""`swarm worker`: run one or many workers (threads) of a run in this process."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import click

from swarm.harness import SessionLimits
from swarm.tasks.model import load_task
from swarm.worker.runtime import HeartbeatPump, WorkerOptions, WorkerRuntime


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
    required=True,
    help="The task directory (goal, solution for sim).",
)
@click.option(
    "--count",
    type=click.IntRange(1, 4096),
    default=1,
    show_default=True,
    help="Workers in this process (threads).",
)
@click.option("--harness", default="sim", show_default=True)
@click.option("--model", help="A litellm model string, e.g. openai/gpt-4.1-mini.")
@click.option("--model-mix", help="e.g. 'strong/model:0.25,cheap/model:0.75', by worker id.")
@click.option("--api-base", help="OpenAI-compatible server URL (vLLM, Ollama, llama.cpp).")
@click.option("--team-size", type=int, default=None, help="Workers in the whole run.")
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
def worker_command(
    hub_url: str,
    join_token: str,
    task_dir: Path,
    count: int,
    harness: str,
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
) -> None:
    """Register COUNT workers with the hub and run their sessions until the budget ends."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per call is 100k+ lines
    task = load_task(task_dir)
    stop = threading.Event()
    _be_nice()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()  # finish the current step, release claims, report stopped

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    options: dict[str, Any] = {}
    if harness == "sim":
        options = {
            "solution": task.solution_path,
            "task_name": task.name,
            "think": think,
            "team_size": team_size or count,
        }
    runtimes = []
    for _ in range(count):
        runtimes.append(
            WorkerRuntime(
                WorkerOptions(
                    hub_url=hub_url,
                    join_token=join_token,
                    workdir_root=workdir_root.resolve(),
                    goal=task.goal_text(),
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
                    oracle=str(task.oracle_path) if task.oracle_path else None,
                    required_approvals=required_approvals,
                ),
                stop=stop,
            )
        )
    pump = HeartbeatPump(runtimes).start()
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
