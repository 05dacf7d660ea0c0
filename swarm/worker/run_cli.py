"""`swarm run` and `swarm demo`: start a run, watch it live, stop it cleanly, say where to look."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from swarm.errors import InvalidInput
from swarm.harness import HARNESSES
from swarm.sandbox import NONE_WARNING, SANDBOXES, bwrap_installed, default_sandbox
from swarm.tasks.catalog import resolve_task_path
from swarm.tasks.model import load_task, parse_budget

if TYPE_CHECKING:  # imported when a run starts: `swarm run --help` stays quick
    from swarm.worker.run import Run, RunOutcome, RunPlan


def _console(stderr: bool) -> Console:
    """Piped output is not cut at 80 columns: suggested commands stay whole, one per line."""
    made = Console(stderr=stderr, soft_wrap=True)
    if not made.is_terminal:
        made.width = 400
    return made


console = _console(stderr=True)  # the live panel and progress
out = _console(stderr=False)  # the outcome: what a script piping `swarm run` keeps


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
        ("dashboard", run.dashboard_url or "—"),
        (
            "run",
            f"{run.plan.run_dir}   {run.plan.workers} workers · {run.plan.harness}"
            f"{' · ' + run.plan.model if run.plan.model else ''}",
        ),
        (
            "time left",
            f"{left // 3600}h{left % 3600 // 60:02d}m{left % 60:02d}s   "
            f"sessions running {summary['sessions']['running']} of {summary['workers']}"
            + (
                f" · failed {summary['sessions']['failed']}"
                if summary["sessions"].get("failed")
                else ""
            ),
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
    if summary.get("hub_error"):
        rows.append(("hub", f"not answering, numbers above are old: {summary['hub_error'][:100]}"))
    disk = summary.get("disk") or {}
    if disk.get("full"):
        rows.append(
            (
                "[red]disk full[/]",
                f"{disk.get('free_mb', '?')} MB free; writes wait for space "
                f"({disk.get('refused', 0)} refused): {_one_line(disk.get('last_error', ''))}",
            )
        )
    for item in summary.get("failing") or []:
        rows.append(("[red]failing[/]", f"{item['worker']}: {_one_line(item['detail'])}"))
    for label, value in rows:
        table.add_row(f"[bold]{label}[/]", escape(value))
    return table


def _one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def preflight(plan: RunPlan) -> None:
    """Check what the harness needs before any worker starts; stop with the fix on failure."""
    from swarm.worker.preflight import first_failure, run_checks

    try:
        checks = run_checks(
            plan.task,
            plan.harness,
            model=plan.model,
            model_mix=plan.model_mix,
            api_base=plan.api_base,
        )
    except KeyboardInterrupt:  # nothing has started yet: nothing to stop
        out.print("swarm run: interrupted during the preflight; nothing was started")
        raise SystemExit(130) from None
    failed = first_failure(checks)
    if failed is not None:
        out.print(f"swarm run: preflight failed: {failed.name}: {failed.detail}", markup=False)
        raise SystemExit(1)


def execute(plan: RunPlan, *, quiet: bool = False, check: bool = True) -> RunOutcome:
    """Start the run, show live progress until it ends (or Ctrl-C), stop it, return the outcome."""
    if check:
        preflight(plan)
    from swarm.worker.run import Run

    run = Run(plan, on_hub_line=lambda line: console.print(f"hub: {line}", markup=False))
    interrupted: list[str] = []
    if plan.sandbox == "none":
        console.print(f"[bold red]warning:[/] {NONE_WARNING}")

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
            if run.dashboard_url and quiet:  # otherwise the panel's first line says it
                console.print(f"dashboard      {run.dashboard_url}", markup=False, highlight=False)
            reason = _watch(run, interrupted, live=console.is_terminal and not quiet, quiet=quiet)
        except BaseException as exc:
            if run.hub is not None:
                run.stop(f"error: {exc}")
            raise
        console.print(
            f"stopping: {reason}; waiting for workers to release their claims …", markup=False
        )
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
                if run.failure and run.last_summary and not quiet:
                    # The panel as the run failed (which workers fail, and why): it may have
                    # failed before the first piped panel was due.
                    final = _progress(run, run.last_summary)
                    if display:
                        display.update(final)
                    else:
                        console.print(final)
                return reason
            summary = run.last_summary or run.summary()
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
        f"run {'failed' if outcome.failed else 'finished'} ({outcome.stopped_because}) in "
        f"{int(outcome.ended - outcome.started)}s",
        f"  hidden tests on main: {score}",
        f"  merged PRs: {prs.get('merged', '?')} · claims completed: "
        f"{s.get('claims', {}).get('completed', '?')} · sessions: "
        f"{s.get('sessions', {}).get('total', '?')} · cost: ${s.get('cost', 0.0):.2f}"
        + (f" · worker processes restarted: {outcome.restarts}" if outcome.restarts else ""),
        f"  run directory: {outcome.run_dir}",
        f"  sandbox: {outcome.sandbox}",
        "    hub.db (context, claims, messages, PRs) · workspace.git (the code) · eval/ · *.log",
        f"  inspect: swarm hub --run-dir {outcome.run_dir}   (dashboard at /dashboard)",
        f"           swarm report {outcome.run_dir}",
        f"           git -C {outcome.run_dir}/workspace.git log --oneline main",
    ]
    disk = outcome.disk
    failed_full = int(s.get("sessions", {}).get("disk_full", 0))
    if disk or failed_full:
        told = []
        if disk:
            told.append(
                f"full {disk['episodes']} time(s), {disk['full_seconds']:.0f}s in all; "
                f"{disk['refused']} writes waited for space"
            )
        if failed_full:
            told.append(f"{failed_full} session(s) failed on a full disk (their FAILs say why)")
        lines.insert(
            3,
            "  disk: "
            + "; ".join(told)
            + (" and it is still full" if disk.get("full") else ", then the run went on")
            + (f" (last: {_one_line(disk['last_error'], 200)})" if disk else ""),
        )
    lines += [f"  note: {note}" for note in outcome.notes]
    for line in lines:
        out.print(line, markup=False, highlight=False)


def _switches(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    from swarm.switches import parse_without

    try:
        return parse_without(value)
    except InvalidInput as exc:
        raise click.BadParameter(exc.message) from None


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_budget(value)
    except InvalidInput as exc:
        raise click.BadParameter(exc.message.removeprefix("budget ")) from None


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
    click.option(
        "--budget",
        callback=_duration,
        help="Wall-clock budget, e.g. 30m, 6h (default: the task's).",
    ),
    click.option(
        "--max-cost",
        type=click.FloatRange(min=0, min_open=True),
        help="Run-wide dollars; no new sessions past it.",
    ),
    click.option(
        "--eval-every",
        default="10m",
        show_default=True,
        callback=_duration,
        help="How often the evaluator scores main.",
    ),
    click.option("--run-dir", type=click.Path(path_type=Path), help="Default: runs/<task>-<time>."),
    click.option("--processes", type=int, help="Worker processes (default: 1 per 256 workers)."),
    click.option(
        "--think", type=float, default=1.0, show_default=True, help="sim: seconds each unit takes."
    ),
    click.option("--required-approvals", type=int, default=0, show_default=True),
    click.option(
        "--without",
        envvar="SWARM_WITHOUT",
        callback=_switches,
        help="Mechanisms to run without (ablations), comma separated: context, claims, dms, "
        "channel, grep, reviews. The hub refuses their calls; the prompt omits them.",
    ),
    click.option("--merge-check", help="Shell command that must pass on the merged tree."),
    click.option("--database-url", help="PostgreSQL URL for the hub (default SQLite)."),
    click.option(
        "--host",
        default="127.0.0.1",
        show_default=True,
        help="Interface the hub (and its dashboard) listens on.",
    ),
    click.option(
        "--port",
        type=click.IntRange(0, 65535),
        default=0,
        help="The hub's port (default: a free one; the panel shows the dashboard's URL).",
    ),
    click.option(
        "--sandbox",
        type=click.Choice(sorted(SANDBOXES)),
        envvar="SWARM_SANDBOX",
        default=default_sandbox,
        show_default="bwrap on Linux",
        help="Where agents' commands run (docs/security.md); `none` only for agents you trust.",
    ),
    click.option("--quiet", is_flag=True, help="No live display."),
]


def with_run_options(func: Any) -> Any:
    for option in reversed(RUN_OPTIONS):
        func = option(func)
    return func


def build_plan(task_dir: Path, **o: Any) -> RunPlan:
    from swarm.worker.run import RunPlan, default_run_dir

    task = load_task(resolve_task_path(task_dir)).require_prepared()
    if o["harness"] == "mini" and not (o["model"] or o["model_mix"]):
        raise InvalidInput(
            "--harness mini needs a model: pass --model (any litellm model string, e.g. "
            "openai/gpt-4.1-mini with OPENAI_API_KEY set, anthropic/claude-sonnet-4-5 with "
            "ANTHROPIC_API_KEY) or --api-base http://127.0.0.1:8000/v1 --model openai/<name> "
            "for a local server; or use --harness sim on a task with a solution"
        )
    if "reviews" in o["without"] and o["required_approvals"]:
        raise InvalidInput(
            f"--required-approvals {o['required_approvals']} needs reviews, but --without "
            "reviews turns them off; drop one of the two"
        )
    return RunPlan(
        task=task,
        run_dir=(o["run_dir"] or default_run_dir(task)).resolve(),
        workers=o["workers"],
        harness=o["harness"],
        model=o["model"],
        model_mix=o["model_mix"],
        api_base=o["api_base"],
        budget_seconds=o["budget"] or task.budget_seconds,
        max_cost=o["max_cost"],
        eval_every=o["eval_every"],
        processes=o["processes"],
        think=o["think"],
        required_approvals=o["required_approvals"],
        merge_check=o["merge_check"],
        database_url=o["database_url"],
        host=o["host"],
        port=o["port"],
        sandbox=o["sandbox"],
        without=o["without"],
    )


@click.command()
@click.argument("task_dir", type=click.Path(file_okay=False, path_type=Path), required=False)
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Continue the stopped or crashed run in this directory: the same workers, their "
    "branches, the context and what is left of the budget (--budget: a new total).",
)
@with_run_options
def run_command(
    task_dir: Path | None, resume_dir: Path | None, quiet: bool, **options: Any
) -> None:
    """Run N identical workers on the task in TASK_DIR (a folder, or a registered task's name:
    `swarm task list`) until it is done or the budget ends."""
    if (task_dir is None) == (resume_dir is None):
        raise click.UsageError(
            "give a TASK_DIR to start a run, or --resume RUN_DIR to continue one"
        )
    if resume_dir is not None:
        from swarm.worker.run import resume_plan

        if options["without"]:
            raise click.UsageError(
                "--resume keeps the run's switches (run.toml's `without`); --without cannot "
                "change them: start a new run for another ablation"
            )
        overrides: dict[str, Any] = {"think": options["think"], "eval_every": options["eval_every"]}
        if options["budget"]:
            overrides["budget_seconds"] = options["budget"]
        plan = resume_plan(resume_dir, **overrides)
    else:
        assert task_dir is not None
        plan = build_plan(task_dir, **options)
        if (plan.run_dir / "run.toml").exists():
            raise click.UsageError(
                f"{plan.run_dir} already holds a run; continue it with "
                f"`swarm run --resume {plan.run_dir}`, or choose another --run-dir"
            )
    outcome = execute(plan, quiet=quiet)
    print_outcome(outcome)
    if outcome.failed:
        raise SystemExit(1)


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
    from swarm.worker.run import RunPlan

    root = (run_dir or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")).resolve()
    task = make_demo_task(root / "task")
    sandbox = default_sandbox()
    if sandbox == "bwrap" and not bwrap_installed():
        # The demo's workers are swarm's own scripted policy, not a model: it runs on a machine
        # without bubblewrap rather than not at all, and says so.
        console.print(
            "note: bubblewrap is not installed, so the demo's simulated workers (swarm's own "
            "code, no model) run without a sandbox; `apt-get install bubblewrap` contains them, "
            "as `swarm run` needs for a model's agents"
        )
        sandbox = "none"
    plan = RunPlan(
        task=task,
        run_dir=root,
        workers=workers,
        harness="sim",
        think=think,
        budget_seconds=600,
        eval_every=3.0,
        sandbox=sandbox,
    )
    outcome = execute(plan, quiet=quiet)
    print_outcome(outcome)
    if outcome.failed:
        raise SystemExit(1)
