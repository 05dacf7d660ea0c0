"""`swarm doctor` (what a run would need, checked now) and `swarm stop` (end a live run)."""

from __future__ import annotations

from pathlib import Path

import click

from swarm.errors import InvalidInput, NotFound
from swarm.harness import HARNESSES


@click.command()
@click.argument("task_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--harness", type=click.Choice(sorted(HARNESSES)), default="sim", show_default=True)
@click.option("--model", help="A litellm model string (mini), e.g. openai/gpt-4.1-mini.")
@click.option("--model-mix", help="Models by share, e.g. 'a/model:0.25,b/model:0.75'.")
@click.option("--api-base", help="OpenAI-compatible server for --model (vLLM, Ollama, …).")
def doctor_command(
    task_dir: Path | None,
    harness: str,
    model: str | None,
    model_mix: str | None,
    api_base: str | None,
) -> None:
    """Check what `swarm run TASK_DIR` with these options needs: git, the task prepared, and
    the harness (sim: solution units; mini: one cheap call to the model; CLIs: --version)."""
    from swarm.tasks.model import load_task
    from swarm.worker.preflight import Check, first_failure, run_checks

    def show(check: Check) -> None:
        mark = "ok  " if check.ok else "FAIL"
        click.echo(f"{mark}  {check.name}: {check.detail}")

    task = load_task(task_dir) if task_dir is not None else None
    checks = run_checks(
        task, harness, model=model, model_mix=model_mix, api_base=api_base, on_check=show
    )
    if first_failure(checks) is not None:
        raise SystemExit(1)
    click.echo("everything a run needs is here")


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
def stop_command(run_dir: Path) -> None:
    """Ask the live run in RUN_DIR to stop: its workers release their claims, main is scored a
    last time, and `swarm run` prints its summary and exits."""
    import httpx

    from swarm.worker.run import read_run_file

    if not (run_dir / "run.toml").is_file():
        raise NotFound(f"{run_dir} is not a run directory (no run.toml); give runs/<task>-<time>")
    info = read_run_file(run_dir)
    if info.get("ended"):
        raise InvalidInput(f"the run in {run_dir} already ended ({info.get('stopped_because')})")
    token_file = run_dir / "operator.token"
    if not token_file.is_file():
        raise NotFound(f"{token_file} is missing: only the operator of a run can stop it")
    url = str(info.get("hub_url", ""))
    try:
        response = httpx.post(
            f"{url}/v1/operator/stop",
            headers={"Authorization": f"Bearer {token_file.read_text().strip()}"},
            timeout=10,
        )
    except httpx.TransportError:
        raise InvalidInput(
            f"the run's hub at {url} does not answer; the run is not live (or was killed)"
        ) from None
    if response.status_code != 200:
        raise InvalidInput(f"the hub at {url} refused: {response.status_code} {response.text}")
    click.echo(f"stop requested: the run in {run_dir} is stopping")
