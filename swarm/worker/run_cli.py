"""`swarm run` and `swarm demo`: start a run, watch it live, stop it cleanly, say where to look."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from swarm.errors import InvalidInput
from swarm.harness import HARNESSES
from swarm.tasks.model import load_task, parse_budget
from swarm.worker.run import Run, RunOutcome, RunPlan, default_run_dir

console = Console(stderr=True)


def _progress(run: Run, summary: dict[str, Any]) -> Table:
    table = Table.grid(padding=(0, 2))
    left = max(0, int(run.deadline - time.time()))
    prs = summary.get("prs") or {}
    claims = summary["claims"]
    checkpoint = summary.get("checkpoint")
    if checkpoint is None:
        score = "not scored yet"
    elif checkpoint.get("reason"):
        score = f"not scored: {checkpoint['reason'][:80]}"
    else:
        score = (
            f"{checkpoint['passed']}/{checkpoint['total']} "
            f"({100 * checkpoint['passed'] / max(1, checkpoint['total']):.0f}%)"
        )
    entries = summary["entries"]
    rows = [
        (
            "run",
            f"{run.plan.run_dir}   {run.plan.workers} workers · {run.plan.harness}"
            f"{' · ' + run.plan.model if run.plan.model else ''}",
        ),
        (
            "time left",
            f"{left // 3600}h{left % 3600 // 60:02d}m{left % 60:02d}s   "
            f"sessions running {summary['sessions']['running']} of {summary['workers']}",
        ),
        ("pass rate", score),
        (
            "claims",
            f"active {claims['active']} · completed {claims['completed']} · "
            f"failed {claims['failed']} · released {claims['released']} · "
            f"lapsed {claims['lapsed']}",
        ),
        ("pull requests", " · ".join(f"{k} {v}" for k, v in prs.items()) or "—"),
        ("context", " · ".join(f"{k} {v}" for k, v in sorted(entries.items())) or "—"),
        (
            "messages",
            f"channel {summary['messages']['channel']} · direct {summary['messages']['direct']}",
        ),
        (
            "tokens · cost",
            f"{summary['tokens_in']:,} in · {summary['tokens_out']:,} out · ${summary['cost']:.2f}",
        ),
    ]
    for label, value in rows:
        table.add_row(f"[bold]{label}[/]", value)
    return table


def execute(plan: RunPlan, *, quiet: bool = False) -> RunOutcome:
    """Start the run, show live progress until it ends (or Ctrl-C), stop it, return the outcome."""
    run = Run(plan)
    interrupted: list[str] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        interrupted.append(signal.Signals(signum).name)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        console.print(
            f"[bold]swarm run[/] {plan.task.name}: starting the hub, "
            f"{plan.workers} workers and the evaluator …"
        )
        try:
            run.start()
            reason = _watch(run, interrupted, live=console.is_terminal and not quiet, quiet=quiet)
        except BaseException as exc:
            if run.hub is not None:
                run.stop(f"error: {exc}")
            raise
        console.print(f"stopping: {reason}; waiting for workers to release their claims …")
        return run.stop(reason)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _watch(run: Run, interrupted: list[str], *, live: bool, quiet: bool) -> str:
    """Poll until the run should end; a live panel on a terminal, a panel every 5 s otherwise."""
    display = Live(console=console, refresh_per_second=2, transient=False) if live else None
    last_print = 0.0
    if display:
        display.start()
    try:
        while True:
            if interrupted:
                return f"stopped by {interrupted[0]}"
            reason = run.poll()
            if reason:
                return reason
            summary = run.summary()
            if display:
                display.update(_progress(run, summary))
            elif not quiet and time.time() - last_print > 5:
                console.print(_progress(run, summary))
                last_print = time.time()
            time.sleep(0.5)
    finally:
        if display:
            display.stop()


def print_outcome(outcome: RunOutcome) -> None:
    s = outcome.summary
    final = outcome.final
    score = (
        f"{final.passed}/{final.total}"
        if final and not final.reason
        else (f"not scored ({final.reason})" if final else "not scored")
    )
    prs = s.get("prs") or {}
    lines = [
        f"[bold]run finished[/] ({outcome.stopped_because}) in "
        f"{int(outcome.ended - outcome.started)}s",
        f"  hidden tests on main: {score}",
        f"  merged PRs: {prs.get('merged', '?')} · claims completed: "
        f"{s.get('claims', {}).get('completed', '?')} · sessions: "
        f"{s.get('sessions', {}).get('total', '?')} · cost: ${s.get('cost', 0.0):.2f}",
        f"  run directory: {outcome.run_dir}",
        "    hub.db (context, claims, messages, PRs) · workspace.git (the code) · eval/ · *.log",
        f"  inspect: swarm hub --run-dir {outcome.run_dir}   (dashboard at /dashboard)",
        f"           swarm report {outcome.run_dir}",
        f"           git -C {outcome.run_dir}/workspace.git log --oneline main",
    ]
    for line in lines:
        console.print(line)


RUN_OPTIONS = [
    click.option("--workers", "-n", type=click.IntRange(1, 4096), default=4, show_default=True),
    click.option(
        "--harness", type=click.Choice(sorted(HARNESSES)), default="sim", show_default=True
    ),
    click.option("--model", help="A litellm model string (mini), e.g. openai/gpt-4.1-mini."),
    click.option(
        "--model-mix",
        help="Models by share, e.g. 'openai/gpt-4.1:0.25,"
        "openai/gpt-4.1-mini:0.75' (assigned by worker id).",
    ),
    click.option("--api-base", help="OpenAI-compatible server for --model (vLLM, Ollama, …)."),
    click.option("--budget", help="Wall-clock budget, e.g. 30m, 6h (default: the task's)."),
    click.option("--max-cost", type=float, help="Run-wide dollars; no new sessions past it."),
    click.option(
        "--eval-every",
        default="10m",
        show_default=True,
        help="How often the evaluator scores main.",
    ),
    click.option("--run-dir", type=click.Path(path_type=Path), help="Default: runs/<task>-<time>."),
    click.option("--processes", type=int, help="Worker processes (default: 1 per 256 workers)."),
    click.option(
        "--think", type=float, default=1.0, show_default=True, help="sim: seconds each unit takes."
    ),
    click.option("--required-approvals", type=int, default=0, show_default=True),
    click.option("--merge-check", help="Shell command that must pass on the merged tree."),
    click.option("--database-url", help="PostgreSQL URL for the hub (default SQLite)."),
    click.option("--quiet", is_flag=True, help="No live display."),
]


def with_run_options(func: Any) -> Any:
    for option in reversed(RUN_OPTIONS):
        func = option(func)
    return func


def build_plan(task_dir: Path, **o: Any) -> RunPlan:
    task = load_task(task_dir).require_prepared()
    if o["harness"] == "mini" and not (o["model"] or o["model_mix"]):
        raise InvalidInput(
            "--harness mini needs a model: pass --model (any litellm model string, e.g. "
            "openai/gpt-4.1-mini with OPENAI_API_KEY set, anthropic/claude-sonnet-4-5 with "
            "ANTHROPIC_API_KEY) or --api-base http://127.0.0.1:8000/v1 --model openai/<name> "
            "for a local server; or use --harness sim on a task with a solution"
        )
    return RunPlan(
        task=task,
        run_dir=(o["run_dir"] or default_run_dir(task)).resolve(),
        workers=o["workers"],
        harness=o["harness"],
        model=o["model"],
        model_mix=o["model_mix"],
        api_base=o["api_base"],
        budget_seconds=parse_budget(o["budget"]) if o["budget"] else task.budget_seconds,
        max_cost=o["max_cost"],
        eval_every=parse_budget(o["eval_every"]),
        processes=o["processes"],
        think=o["think"],
        required_approvals=o["required_approvals"],
        merge_check=o["merge_check"],
        database_url=o["database_url"],
    )


@click.command()
@click.argument("task_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@with_run_options
def run_command(task_dir: Path, quiet: bool, **options: Any) -> None:
    """Run N identical workers on the task in TASK_DIR until it is done or the budget ends."""
    outcome = execute(build_plan(task_dir, **options), quiet=quiet)
    print_outcome(outcome)


@click.command()
@click.option("--workers", "-n", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option(
    "--think", type=float, default=2.0, show_default=True, help="Seconds each unit of work takes."
)
@click.option("--run-dir", type=click.Path(path_type=Path), help="Default: runs/demo-<time>.")
@click.option("--quiet", is_flag=True)
def demo_command(workers: int, think: float, run_dir: Path | None, quiet: bool) -> None:
    """A small run that needs no model, server or download: simulated workers build a little
    text library (textkit) from its spec, and the evaluator scores it as they merge."""
    from swarm.tasks.demo import make_demo_task

    root = (run_dir or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")).resolve()
    task = make_demo_task(root / "task")
    plan = RunPlan(
        task=task,
        run_dir=root,
        workers=workers,
        harness="sim",
        think=think,
        budget_seconds=600,
        eval_every=3.0,
    )
    outcome = execute(plan, quiet=quiet)
    print_outcome(outcome)
