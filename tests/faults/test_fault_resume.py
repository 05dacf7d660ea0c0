"""A stopped run continued with `swarm run --resume`: same workers, same code, the rest of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarm.tasks.demo import make_scale_task
from swarm.worker.run import Run, read_run_file
from tests.faults.faultkit import RunDB, assert_consistent, plan_for, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def swarm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "swarm", *args],
        capture_output=True, text=True, timeout=300, cwd=cwd, env=env,
    )  # fmt: skip


def test_a_stopped_run_resumes_with_the_same_workers_and_finishes(tmp_path: Path) -> None:
    task = make_scale_task(tmp_path / "task", units=12)
    run = Run(plan_for(task, tmp_path / "run", workers=4, processes=2, think=1.5))
    db = RunDB(run.plan.run_dir)
    run.start()
    try:
        wait_until(
            "a few merges",
            lambda: db.one("SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'") >= 3,
            timeout=120,
        )
    finally:
        first = run.stop("stopped by SIGINT")
    merged_before = db.one("SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'")
    assert merged_before < 12 and first.final is not None and first.final.passed < 12
    assert read_run_file(run.plan.run_dir)["spent_seconds"] > 0
    # Starting anew in the same directory is refused with the way to continue.
    again = swarm(
        "run", str(task.root), "--run-dir", str(run.plan.run_dir), "--quiet", cwd=tmp_path
    )
    assert again.returncode == 2 and f"swarm run --resume {run.plan.run_dir}" in again.stderr
    resumed = swarm(
        "run", "--resume", str(run.plan.run_dir), "--think", "0.5", "--quiet", cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    said = resumed.stdout + resumed.stderr
    assert "every worker finished" in said
    assert "hidden tests on main: 12/12" in said
    assert db.one("SELECT COUNT(*) FROM workers") == 4  # the same four, none registered anew
    assert db.one("SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'") == 12
    assert_consistent(db, task)
