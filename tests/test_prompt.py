"""The worker prompt renders strictly and is identical for all workers but the ID."""

from __future__ import annotations

import jinja2
import pytest

from swarm.worker.prompt import VARIABLES, environment, prompts_dir, render_worker_prompt


def test_every_prompt_renders_with_every_variable() -> None:
    env = environment()
    values = {
        "worker": "w7",
        "team_size": 16,
        "goal": "Build textkit.",
        "tools": "sw ...",
        "oracle": "/opt/cmark",
        "required_approvals": 1,
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
    assert "reference program" not in one
    assert "/opt/cmark" in render_worker_prompt(
        worker="w1", team_size=8, goal="G", oracle="/opt/cmark"
    )
