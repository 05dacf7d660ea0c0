"""`swarm experiment PLAN.toml`: run a plan's grid of runs, resumably."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("experiment")
@click.argument("plan_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="The experiment's directory (default: experiments/<plan name>). Give the same one "
    "again to resume: finished runs are kept, the others are (re)done.",
)
@click.option(
    "--parallel",
    "-k",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Runs at a time.",
)
@click.option(
    "--cpu-budget",
    type=click.FloatRange(min=0, min_open=True),
    help="Start another run beside running ones only while the 1-minute load average is "
    "below this (e.g. the number of cores the grid may use).",
)
@click.option("--retry-failed", is_flag=True, help="Run again the runs that failed.")
@click.option("--dry-run", is_flag=True, help="Check the plan and list its runs; run nothing.")
def experiment_command(
    plan_file: Path,
    directory: Path | None,
    parallel: int,
    cpu_budget: float | None,
    retry_failed: bool,
    dry_run: bool,
) -> None:
    """Run the grid of PLAN_FILE (task × setup × workers × ablation × seed), each run a
    `swarm run` in its own directory; then `swarm report DIR` gives the statistics."""
    from swarm.experiment.plan import load_plan
    from swarm.experiment.runner import Grid
    from swarm.experiment.state import open_state, read_state

    plan = load_plan(plan_file)
    directory = (directory or Path("experiments") / plan.name).resolve()
    if dry_run:
        done = read_state(directory).runs if (directory / "experiment.json").is_file() else {}
        for spec in plan.runs():
            status = done.get(spec.id, {}).get("status", "to run")
            click.echo(f"{spec.id}\t{spec.config.label} · seed {spec.seed}\t{status}")
        click.echo(f"{len(plan.runs())} runs in {len(plan.configs)} configurations")
        return
    state = open_state(directory, plan)
    grid = Grid(plan, state, parallel=parallel, cpu_budget=cpu_budget, retry_failed=retry_failed)
    left = grid.run()
    failed = sum(1 for r in state.runs.values() if r["status"] == "failed")
    if grid.stop_signals:
        click.echo(
            f"stopped by {grid.stop_signals[0]}: {len(plan.runs()) - left} of {len(plan.runs())} "
            f"runs finished; resume with: swarm experiment {plan_file} --dir {directory}"
        )
        raise SystemExit(130)
    click.echo(
        f"experiment {plan.name}: {len(plan.runs()) - left} of {len(plan.runs())} runs finished"
        + (f", {failed} failed (see {directory}/logs; --retry-failed runs them again)"
           if failed else "")
        + f"\n  report: swarm report {directory}"
    )  # fmt: skip
    if left:
        raise SystemExit(1)
