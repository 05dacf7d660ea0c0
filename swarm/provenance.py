"""What a run was made with, recorded in its run.toml's [provenance] table so that runs can be
compared honestly: the prompt's hash, the task's, the seed, the harness and its version, the
models (as configured, and as the provider reported them), swarm's version and the machine."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swarm import __version__

if TYPE_CHECKING:
    from swarm.tasks.model import Task

# The keys `swarm report` compares across an experiment's runs (besides the plan's axes).
MACHINE_KEYS = ("swarm_version", "python", "platform", "cpu_count", "prompt_sha256")
REPORTED = "models reported by the provider: "


def sha256_text(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:16]


@functools.cache
def prompt_hash() -> str:
    """The worker prompt template's hash (the rendered prompt differs only by the worker's
    ID and the run's switches, both recorded beside it)."""
    from swarm.worker.prompt import prompts_dir

    return sha256_text((prompts_dir() / "worker.md").read_bytes())


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def harness_version(harness: str) -> str:
    """The harness's own version: swarm's for the sim (its policy is swarm's code), the
    packages' for mini, the CLI's `--version` for claude-code and codex."""
    if harness == "sim":
        return f"swarm {__version__}"
    if harness == "mini":
        parts = [f"{n} {v}" for n in ("mini-swe-agent", "litellm") if (v := _package_version(n))]
        return ", ".join(parts) or "not installed"
    env = {"claude-code": "SWARM_CLAUDE_BIN", "codex": "SWARM_CODEX_BIN"}.get(harness)
    binary = os.environ.get(env or "", "") or {"claude-code": "claude"}.get(harness, harness)
    if shutil.which(binary) is None:
        return "not found"
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (done.stdout or done.stderr).strip().splitlines()[0][:200] if done.stdout or \
        done.stderr else "unknown"  # fmt: skip


def task_hash(task: Task) -> str:
    """The task's description (its task.toml: the generator's options and the seed)."""
    try:
        return sha256_text((task.root / "task.toml").read_bytes())
    except OSError:
        return ""


def provenance(
    task: Task, harness: str, model: str | None, model_mix: str | None
) -> dict[str, Any]:
    """The [provenance] table of a run.toml."""
    seed = os.environ.get("SWARM_SEED") or task.prepare_options.get("seed", "")
    return {
        "swarm_version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count() or 0,
        "prompt_sha256": prompt_hash(),
        "task_sha256": task_hash(task),
        "seed": str(seed),
        "harness": harness,
        "harness_version": harness_version(harness),
        "models": [m for m in (model, *(_mix_models(model_mix))) if m],
    }


def _mix_models(mix: str | None) -> list[str]:
    if not mix:
        return []
    return [part.rsplit(":", 1)[0].strip() for part in mix.split(",") if part.strip()]


def reported_models(details: Iterable[str]) -> list[str]:
    """The model names the provider answered with, as the mini harness notes them in each
    session's detail."""
    found: set[str] = set()
    for detail in details:
        for match in re.finditer(re.escape(REPORTED) + r"(.+)", detail or ""):
            found.update(m.strip() for m in match.group(1).split(",") if m.strip())
    return sorted(found)


def read_provenance(run_dir: Path) -> dict[str, Any]:
    import tomllib

    try:
        data = tomllib.loads((run_dir / "run.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    table = data.get("provenance")
    return dict(table) if isinstance(table, dict) else {}
