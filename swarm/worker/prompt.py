"""The worker prompt: one template, identical for every worker except its ID, rendered strictly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

TOOLS = """\
sw inbox | sw tail [-n N] [--type T] | sw claims [--all|--mine] | sw grep PATTERN [-i] [--type T]
sw show ID | sw feed | sw whoami
sw claim PATHS... [topic:NAME] -m TEXT [--lease S] | sw renew ID | sw release ID
sw observed TEXT | sw fact TEXT [--supersedes ID] | sw fail TEXT [--claim ID]
sw summary CLAIM_ID TEXT
sw say TEXT | sw dm WORKER TEXT
sw pr open --title T [--body B] [--branch B] | sw pr list [--state S] | sw pr show N
sw pr review N approve|request_changes|comment [-m TEXT] | sw pr merge N | sw pr close N"""

VARIABLES = ("worker", "team_size", "goal", "tools", "oracle", "required_approvals")


def prompts_dir() -> Path:
    """`prompts/` beside the package in a checkout, or `swarm/_prompts` in an installed wheel."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "prompts", here / "_prompts"):
        if (candidate / "worker.md").exists():
            return candidate
    raise FileNotFoundError("the prompts directory is missing from this installation")


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(prompts_dir()),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_worker_prompt(
    *,
    worker: str,
    team_size: int,
    goal: str,
    oracle: str | None = None,
    required_approvals: int = 0,
) -> str:
    values: dict[str, Any] = {
        "worker": worker,
        "team_size": team_size,
        "goal": goal.strip(),
        "tools": TOOLS,
        "oracle": oracle or "",
        "required_approvals": required_approvals,
    }
    return environment().get_template("worker.md").render(**values)
