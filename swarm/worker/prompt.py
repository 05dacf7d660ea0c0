"""The worker prompt: one template, identical for every worker except its ID, rendered strictly.

A run's ablation switches (swarm.switches) remove the prompt's lines about their mechanism, and
the tools list shows only the commands the run has."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jinja2

from swarm.switches import enabled, parse_without

# Each line of the tools list, and the mechanisms it needs (all of them).
TOOL_LINES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sw inbox", ("channel",)),
    ("sw tail [-n N] [--type T]", ("context",)),
    ("sw claims [--all|--mine]", ("claims",)),
    ("sw grep PATTERN [-i] [--type T]", ("context", "grep")),
    ("\nsw show ID", ("context",)),
    ("sw feed", ("context",)),
    ("sw whoami", ()),
    ("sw workers", ()),
    ("\nsw claim PATHS|FILE::SYMBOL... [topic:NAME] -m TEXT [--lease S]", ("claims",)),
    ("sw renew ID", ("claims",)),
    ("sw release ID", ("claims",)),
    ("\nsw observed TEXT", ("context",)),
    ("sw fact TEXT [--supersedes ID]", ("context",)),
    ("sw fail TEXT [--claim ID]", ("context",)),
    ("\nsw summary CLAIM_ID TEXT", ("context", "claims")),
    ("\nsw say TEXT", ("channel",)),
    ("sw dm WORKER TEXT", ("dms",)),
    ("\nsw pr open --title T [--body B] [--branch B]", ()),
    ("sw pr list [--state S]", ()),
    ("sw pr show N", ()),
    ("\nsw pr review N approve|request_changes|comment [-m TEXT]", ("reviews",)),
    ("sw pr merge N", ()),
    ("sw pr close N", ()),
    # An abandoned PR whose files you claimed: continue it as yours.
    ("sw pr take N [--branch B]", ("claims",)),
)

VARIABLES = (
    "worker",
    "team_size",
    "goal",
    "tools",
    "oracle",
    "required_approvals",
    "on",
    "without",
)


def tools_text(without: Iterable[str] = ()) -> str:
    """The tools list: the commands of the mechanisms the run has, a group a line."""
    on = enabled(without)
    kept = [text for text, needs in TOOL_LINES if all(on[n] for n in needs)]
    lines: list[list[str]] = [[]]
    for text in kept:
        if text.startswith("\n") and lines[-1]:
            lines.append([])
        lines[-1].append(text.lstrip("\n"))
    return "\n".join(" | ".join(group) for group in lines if group)


TOOLS = tools_text()


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
    without: Iterable[str] = (),
) -> str:
    off = parse_without(without)
    values: dict[str, Any] = {
        "worker": worker,
        "team_size": team_size,
        "goal": goal.strip(),
        "tools": tools_text(off),
        "oracle": oracle or "",
        "required_approvals": required_approvals if "reviews" not in off else 0,
        "on": enabled(off),
        "without": list(off),
    }
    return environment().get_template("worker.md").render(**values)
