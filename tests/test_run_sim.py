"""End to end: `swarm run` with simulated workers (hub process, worker processes, evaluator,
real git, real HTTP), asserted against the run's database and git."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from swarm.tasks.demo import make_scale_task
from swarm.tasks.model import Task
from swarm.tasks.prepare import prepare_task
from swarm.tasks.units import Unit, parse_units
from swarm.worker.run import Run, RunPlan
from swarm.worker.run_cli import execute

ROOT = Path(__file__).resolve().parents[1]
INFLECTION = ROOT / "examples" / "tasks" / "inflection"


def units_of(task: Task) -> list[Unit]:
    return parse_units(task.solution_path.read_text(), str(task.solution_path))


def query(run_dir: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{run_dir / 'hub.db'}?mode=ro", uri=True, timeout=30) as conn:
        return conn.execute(sql, args).fetchall()


def git(run_dir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(run_dir / "workspace.git"), *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def merges_per_unit(run_dir: Path, units: list[Unit]) -> dict[str, int]:
    """How many merged PRs on main's first-parent line carry each unit (by commit subject:
    the sim commits `unit <id>: <title>`)."""
    counts = {u.id: 0 for u in units}
    for line in git(
        run_dir, "log", "--first-parent", "--merges", "--format=%H %P", "main"
    ).splitlines():
        _merge, first, second = line.split()
        subjects = git(run_dir, "log", "--format=%s", f"{first}..{second}").splitlines()
        for subject in subjects:
            if subject.startswith("unit ") and ":" in subject:
                unit = subject[5:].split(":", 1)[0]
                if unit in counts:
                    counts[unit] += 1
    return counts


def plan_for(task: Task, run_dir: Path, **kw: Any) -> RunPlan:
    defaults: dict[str, Any] = dict(
        task=task,
        run_dir=run_dir,
        workers=8,
        harness="sim",
        think=0.2,
        budget_seconds=240,
        eval_every=600,
    )
    return RunPlan(**{**defaults, **kw})


@pytest.fixture(scope="module")
def inflection() -> Task:
    return prepare_task(INFLECTION)  # downloads from PyPI once, then cached


def test_inflection_with_8_workers_reaches_every_hidden_test(
    inflection: Task, tmp_path: Path
) -> None:
    started = time.monotonic()
    outcome = execute(plan_for(inflection, tmp_path / "run", eval_every=2.0), quiet=True)
    run_dir = outcome.run_dir
    assert outcome.stopped_because == "every worker finished"
    assert outcome.final is not None and outcome.final.reason is None
    assert (outcome.final.passed, outcome.final.total) == (455, 455)
    units = units_of(inflection)
    assert merges_per_unit(run_dir, units) == {u.id: 1 for u in units}
    assert query(run_dir, "SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'")[0][0] == 12
    # The evaluator scored main as it moved: the pass counts never fall and they rise.
    points = [
        p
        for (p,) in query(
            run_dir, "SELECT passed FROM checkpoints WHERE reason IS NULL ORDER BY time, id"
        )
    ]
    assert points == sorted(points) and points[-1] == 455
    assert len(set(points)) >= 2, points
    # Nobody holds a claim after the run; every worker reported itself stopped.
    assert (
        query(
            run_dir,
            "SELECT COUNT(*) FROM claims WHERE ended_at IS NULL AND lease_until > ?",
            time.time(),
        )[0][0]
        == 0
    )
    assert {s for (s,) in query(run_dir, "SELECT state FROM workers")} == {"stopped"}
    assert time.monotonic() - started < 180


def test_inflection_with_1_worker_finishes(inflection: Task, tmp_path: Path) -> None:
    outcome = execute(plan_for(inflection, tmp_path / "run", workers=1, think=0.05), quiet=True)
    assert outcome.stopped_because == "every worker finished"
    assert outcome.final is not None and (outcome.final.passed, outcome.final.total) == (455, 455)
    units = units_of(inflection)
    assert merges_per_unit(outcome.run_dir, units) == {u.id: 1 for u in units}
    assert query(outcome.run_dir, "SELECT COUNT(*) FROM claims")[0][0] == 12  # no yielding


def test_killed_worker_process_frees_its_claims_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = 6.0
    monkeypatch.setenv("SWARM_CLAIM_LEASE_SECONDS", str(lease))  # the hub inherits it
    task = make_scale_task(tmp_path / "task", units=12)
    run = Run(plan_for(task, tmp_path / "run", workers=2, processes=2, think=2.5))
    run_dir = run.plan.run_dir
    run.start()
    try:
        # Wait until both workers have merged something and hold a claim.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            merged = query(
                run_dir, "SELECT COUNT(DISTINCT author) FROM pull_requests WHERE state = 'merged'"
            )[0][0]
            holding = query(
                run_dir, "SELECT COUNT(DISTINCT owner_id) FROM claims WHERE ended_at IS NULL"
            )[0][0]
            if merged == 2 and holding == 2:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the workers did not get going")
        victim = run.workers[0]
        os.killpg(victim.pid, signal.SIGKILL)  # no chance to release or report
        victim.wait()
        killed_at = time.time()
        while run.poll() is None:
            assert time.time() - killed_at < 120, "the run did not go on"
            time.sleep(0.5)
        outcome = run.stop("every worker finished")
    except BaseException:
        run.stop("test failed")
        raise
    # The killed worker is the one that never reported `stopped`.
    dead = query(run_dir, "SELECT id, name FROM workers WHERE state <> 'stopped'")
    assert len(dead) == 1, dead
    dead_id, dead_name = dead[0]
    # Its claims were never ended by anyone: their leases lapsed, and a peer took the unit.
    open_claims = query(
        run_dir,
        "SELECT id, scope, lease_until FROM claims WHERE owner_id = ? AND ended_at IS NULL",
        dead_id,
    )
    assert open_claims, "the killed worker held a claim"
    for _id, _scope, lease_until in open_claims:
        assert lease_until <= killed_at + lease + 1
    # Its pushed work is intact: its merged PRs are on main, its branches still in the repo.
    merged = query(
        run_dir,
        "SELECT merge_commit, head, branch FROM pull_requests "
        "WHERE author = ? AND state = 'merged'",
        dead_name,
    )
    assert merged
    for merge_commit, head, branch in merged:
        git(run_dir, "merge-base", "--is-ancestor", merge_commit, "main")
        assert git(run_dir, "rev-parse", f"refs/heads/{branch}").strip() == head
    # The run went on: every unit on main exactly once, all hidden tests pass.
    assert outcome.final is not None and outcome.final.passed == outcome.final.total == 12
    units = units_of(task)
    assert merges_per_unit(run_dir, units) == {u.id: 1 for u in units}


def test_demo_completes_with_every_hidden_test_passing(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "swarm",
            "demo",
            "--workers",
            "4",
            "--think",
            "0.2",
            "--run-dir",
            str(run_dir),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "every worker finished" in done.stderr
    passed, total = query(
        run_dir,
        "SELECT passed, total FROM checkpoints WHERE reason IS NULL "
        "ORDER BY time DESC, id DESC LIMIT 1",
    )[0]
    assert total > 0 and passed == total
    assert f"hidden tests on main: {passed}/{total}" in done.stderr


def test_hub_timing_histogram() -> None:
    """The opt-in server-side timing (swarm.hub.timing) reports per-route percentiles."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from swarm.hub.timing import install_timing, route_group

    app = FastAPI()

    @app.get("/v1/prs/{number}")
    def pr(number: int) -> dict[str, int]:
        time.sleep(0.002)
        return {"number": number}

    timings = install_timing(app)
    with TestClient(app) as client:
        for n in range(50):
            assert client.get(f"/v1/prs/{n}").json() == {"number": n}
    report = timings.report()
    route = report["routes"]["GET /v1/prs/{n}"]
    assert route["count"] == 50 and 0.002 <= route["p50"] <= route["p99"] <= route["max"] * 1.2
    assert json.dumps(report)
    assert route_group("POST", "/git/workspace.git/git-receive-pack") == "POST git git-receive-pack"
