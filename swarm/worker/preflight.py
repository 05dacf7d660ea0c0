"""Preflight: check what a run's harness needs before any worker starts, so that a missing key,
CLI or solution fails in seconds with the fix on screen instead of as silent failed sessions."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from swarm.errors import SwarmError
from swarm.tasks.model import Task

# The one model call is tiny: a word in, a token or two out.
PING = [{"role": "user", "content": "Reply with the word OK."}]
# The one variable litellm reads each provider's key from, for providers that cannot do without
# one: a missing one fails the check at once, before litellm is imported (seconds on a loaded
# machine). Providers with several possible variables (openrouter, gemini, …) and a model with
# --api-base are asked.
PROVIDER_KEYS = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "groq": "GROQ_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "xai": "XAI_API_KEY",
}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str  # what was found, or what is wrong and how to fix it


def check_task(task: Task) -> Check:
    missing = task.missing()
    if missing is None:
        return Check("task", True, f"{task.name} is prepared")
    fix = (
        f"run `swarm task prepare {task.root}`"
        if task.prepare
        else "the task has no `prepare` step: restore the missing file"
    )
    return Check("task", False, f"{task.name}: {missing}; {fix}")


def check_sim(task: Task) -> Check:
    from swarm.tasks.units import parse_units

    solution = task.solution_path
    if solution is None or not solution.is_file():
        return Check(
            "sim",
            False,
            f"{task.name} ships no solution units (no `solution` in its task.toml), and the "
            "sim harness replays them; use a task with a solution, or --harness mini --model …",
        )
    try:
        units = parse_units(solution.read_text(encoding="utf-8"), str(solution))
    except SwarmError as exc:
        return Check("sim", False, f"{solution}: {exc.message}")
    if not units:
        return Check("sim", False, f"{solution} holds no units; the sim harness has nothing to do")
    return Check("sim", True, f"{len(units)} solution units")


def model_kwargs(model: str, api_base: str | None) -> dict[str, object]:
    """The arguments the mini harness gives litellm for this model (the same key rule)."""
    kwargs: dict[str, object] = {}
    if api_base:
        kwargs["api_base"] = api_base
        if model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
            kwargs["api_key"] = "none"  # local servers ignore it; litellm's client wants one
    return kwargs


def check_model(model: str, api_base: str | None, timeout: float = 30.0) -> Check:
    """One cheap call with the run's model, key and API base."""
    name = f"model {model}"
    provider = model.split("/", 1)[0] if "/" in model else ""
    key = PROVIDER_KEYS.get(provider)
    if key and not api_base and not os.environ.get(key):
        return Check(
            name, False, f"{key} is not set — set {key}, or pass --api-base for a local server"
        )
    # The packaged price list: no download at import (a run may have no internet at all).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError:
        return Check(name, False, "litellm is not installed: pip install 'swarm[mini]'")
    litellm.suppress_debug_info = True  # its "Give Feedback" banner is not the reason
    try:
        litellm.completion(
            model=model,
            messages=PING,
            max_tokens=5,
            timeout=timeout,
            num_retries=0,
            **model_kwargs(model, api_base),
        )
    except Exception as exc:
        return Check(name, False, _model_fix(model, api_base, exc))
    return Check(name, True, "answered" + (f" at {api_base}" if api_base else ""))


def _model_fix(model: str, api_base: str | None, exc: Exception) -> str:
    message = " ".join(str(exc).split())[:300]
    kind = type(exc).__name__
    provider = model.split("/", 1)[0].upper() if "/" in model else ""
    if "Authentication" in kind or "api_key" in message.lower() or "api key" in message.lower():
        fix = f"set {provider}_API_KEY" if provider else "set the provider's API key"
        return f"{kind}: {message} — {fix}, or pass --api-base for a local server"
    if "NotFound" in kind or "BadRequest" in kind:
        return f"{kind}: {message} — check the --model name (a litellm model string)"
    if "Connection" in kind or "Timeout" in kind:
        where = api_base or "the provider"
        return f"{kind}: {message} — is {where} reachable?"
    return f"{kind}: {message}"


def check_cli(harness: str) -> Check:
    """The agent CLI is on PATH (or where its variable points) and answers `--version`."""
    from swarm.harness import get_harness
    from swarm.harness.cli_agents import CliAgentHarness

    agent = get_harness(harness)
    assert isinstance(agent, CliAgentHarness)
    try:
        executable = agent.resolve(dict(os.environ))
    except SwarmError as exc:
        return Check(harness, False, exc.message)
    try:
        done = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(harness, False, f"{executable} --version failed: {exc}")
    output = (done.stdout.strip() or done.stderr.strip()).splitlines()
    first = output[0][:120] if output else ""
    if done.returncode != 0:
        return Check(harness, False, f"{executable} --version exited {done.returncode}: {first}")
    return Check(harness, True, f"{executable}: {first}")


def models_of(model: str | None, model_mix: str | None) -> list[str]:
    if model_mix:
        from swarm.worker.models import parse_mix

        return [name for name, _ in parse_mix(model_mix)]
    return [model] if model else []


def run_checks(
    task: Task | None,
    harness: str,
    *,
    model: str | None = None,
    model_mix: str | None = None,
    api_base: str | None = None,
    on_check: Callable[[Check], None] = lambda _check: None,
) -> list[Check]:
    """Every check the harness needs, in order; a failed task check skips the rest."""
    checks: list[Check] = []

    def add(check: Check) -> None:
        checks.append(check)
        on_check(check)

    add(Check("git", bool(shutil.which("git")), shutil.which("git") or "git is not on PATH"))
    if task is not None:
        add(check_task(task))
        if not checks[-1].ok:
            return checks
    if harness == "sim":
        if task is not None:
            add(check_sim(task))
    elif harness == "mini":
        names = models_of(model, model_mix)
        if not names:
            add(Check("model", False, "--harness mini needs --model (a litellm model string)"))
        for name in names:
            add(check_model(name, api_base))
    else:
        add(check_cli(harness))
    return checks


def first_failure(checks: list[Check]) -> Check | None:
    return next((c for c in checks if not c.ok), None)
