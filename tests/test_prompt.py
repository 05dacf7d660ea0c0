"""The worker prompt renders strictly and is identical for all workers but the ID, for every
combination of ablation switches, and lacks what a switch removes."""

from __future__ import annotations

import itertools

import jinja2
import pytest

from swarm.switches import KNOWN, enabled
from swarm.worker.prompt import VARIABLES, environment, prompts_dir, render_worker_prompt

ALL_COMBINATIONS = [
    combo for size in range(len(KNOWN) + 1) for combo in itertools.combinations(KNOWN, size)
]
# What each mechanism's section tells agents to run: gone from the prompt without it.
COMMANDS = {
    "context": ("sw fact", "sw observed", "sw tail", "sw summary", "sw grep", "sw show"),
    "claims": ("sw claim ", "sw claims", "sw renew", "sw release", "sw summary"),
    "dms": ("sw dm",),
    "channel": ("sw inbox", "sw say"),
    "grep": ("sw grep",),
    "reviews": ("sw pr review",),
}


def test_every_prompt_renders_with_every_variable() -> None:
    env = environment()
    values = {
        "worker": "w7",
        "team_size": 16,
        "goal": "Build textkit.",
        "tools": "sw ...",
        "oracle": "/opt/cmark",
        "required_approvals": 1,
        "on": enabled(()),
        "without": [],
    }
    assert set(values) == set(VARIABLES)
    for path in sorted(prompts_dir().glob("*.md")):
        text = env.get_template(path.name).render(**values)
        assert "{{" not in text and "{%" not in text


def test_a_missing_variable_is_an_error() -> None:
    with pytest.raises(jinja2.UndefinedError):
        environment().get_template("worker.md").render(worker="w1")


def test_prompts_differ_only_by_worker_id() -> None:
    one = render_worker_prompt(worker="w1", team_size=8, goal="G")
    two = render_worker_prompt(worker="w2", team_size=8, goal="G")
    assert one != two and one.replace("w1", "w2") == two
    for duty in (
        "sw claim",
        "sw dm",
        "sw fact",
        "sw fail",
        "sw pr merge",
        "sw summary",
        "origin/main",
    ):
        assert duty in one
    assert "sw oracle" not in one and "original program" not in one
    # With an oracle the prompt says how to run it (and it is still the same for everyone).
    three = render_worker_prompt(worker="w3", team_size=8, goal="G", oracle="jq")
    four = render_worker_prompt(worker="w4", team_size=8, goal="G", oracle="jq")
    assert "The original program, `jq`, can be run but not read: `sw oracle ARGS..." in three
    assert three.replace("w3", "w4") == four


@pytest.mark.parametrize("without", ALL_COMBINATIONS, ids=lambda c: ",".join(c) or "all-on")
def test_every_combination_of_switches_renders_without_its_sections(
    without: tuple[str, ...],
) -> None:
    one = render_worker_prompt(
        worker="w1", team_size=8, goal="G", without=without, required_approvals=1
    )
    two = render_worker_prompt(
        worker="w2", team_size=8, goal="G", without=without, required_approvals=1
    )
    assert one.replace("w1", "w2") == two  # identical for every worker but the ID
    assert "{{" not in one and "{%" not in one and "  \n" not in one
    for name, commands in COMMANDS.items():
        for command in commands:
            present = command in one
            # `sw summary` needs both the context and claims; the others need only their own.
            needed = [n for n, cs in COMMANDS.items() if command in cs]
            assert present == all(n not in without for n in needed), (name, command)
    assert "sw pr merge" in one and "origin/main" in one  # the loop itself never goes
    if without:
        assert f"started without: {', '.join(sorted(without))}" in one
    else:
        assert "started without" not in one


def test_an_unknown_switch_is_refused_with_the_known_ones() -> None:
    from swarm.errors import InvalidInput

    with pytest.raises(InvalidInput, match="known: channel, claims, context, dms, grep, reviews"):
        render_worker_prompt(worker="w1", team_size=2, goal="G", without=["claim"])
