"""Real sim runs on the hazard workload (hub, worker processes, git, evaluator) show the
direction of each ablation's effect on a fixed seed: without claims more work is done twice,
without the context more failures are repeated."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarm.report.measures import measure
from swarm.report.source import open_run
from tests.test_hazard import EXAMPLE

SWARM = str(Path(sys.executable).parent / "swarm")


def run(task: Path, run_dir: Path, without: str) -> dict[str, float | int | None]:
    env = {**os.environ, "SWARM_SEED": "5"}
    done = subprocess.run(
        [SWARM, "run", str(task), "--workers", "4", "--think", "0.3", "--budget", "8m",
         "--eval-every", "5s", "--quiet", "--run-dir", str(run_dir), "--without", without],
        capture_output=True, text=True, timeout=540, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with open_run(run_dir) as source:
        figures = measure(source).figures()
    assert figures["final_pass_rate"] == 1.0, figures  # every run still finishes the task
    return figures


@pytest.mark.slow
@pytest.mark.timeout(900)  # three runs; a loaded 2-core machine makes each a few minutes
def test_removing_claims_duplicates_work_and_removing_the_context_repeats_failures(
    tmp_path: Path,
) -> None:
    task = tmp_path / "hazard"
    shutil.copytree(EXAMPLE, task)
    toml = (task / "task.toml").read_text().replace("units = 48", "units = 24")
    (task / "task.toml").write_text(toml.replace("seed = 1", "seed = 3"))
    subprocess.run([SWARM, "task", "prepare", str(task)], check=True, capture_output=True)
    full = run(task, tmp_path / "all", "")
    no_claims = run(task, tmp_path / "claims", "claims")
    no_context = run(task, tmp_path / "context", "context")
    assert no_claims["duplicated_work"] > full["duplicated_work"], (no_claims, full)  # type: ignore[operator]
    assert no_context["repeated_failures"] > full["repeated_failures"], (no_context, full)  # type: ignore[operator]
    assert no_claims["overlapping_claims"] == 0 and full["overlapping_claims"]
    assert no_context["repeated_failures"] is not None  # counted without any FAIL recorded
    with open_run(tmp_path / "context") as source:
        assert "FAIL" not in measure(source).entries_by_type


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_sim_finishes_a_plain_task_without_every_mechanism(tmp_path: Path) -> None:
    """Any task runs with every switch: the sim never makes a call the hub refuses (a refused
    call would fail its session), and the hub holds nothing of what was switched off."""
    from swarm.tasks.demo import make_demo_task

    task = make_demo_task(tmp_path / "demo")
    every = "context,claims,dms,channel,grep,reviews"
    figures = run(task.root, tmp_path / "run", every)
    assert figures["merged_prs"] == 12
    with open_run(tmp_path / "run") as source:
        m = measure(source)
        assert m.entries_by_type == {} and m.dm_graph == {} and m.channel_posts == {}
        assert m.without == tuple(sorted(every.split(",")))
        with source.db.read() as conn:
            from sqlalchemy import select

            from swarm.worker.schema import sessions

            ended = {r.ended for r in conn.execute(select(sessions.c.ended))}
        assert "error" not in ended
