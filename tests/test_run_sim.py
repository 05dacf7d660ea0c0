"""End to end: `swarm run` with simulated workers (hub process, worker processes, evaluator,
real git, real HTTP), asserted against the run's database and git."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from swarm.tasks.model import Task
from swarm.tasks.prepare import prepare_task
from swarm.tasks.units import Unit, parse_units
from swarm.worker.run import RunPlan
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
def inflection(tmp_path_factory: pytest.TempPathFactory) -> Task:
    """A prepared copy: preparing never writes into the repository's examples/."""
    root = tmp_path_factory.mktemp("tasks") / "inflection"
    root.mkdir()
    shutil.copy(INFLECTION / "task.toml", root)
    return prepare_task(root)  # downloads from PyPI once per session (the cache is temporary)


@pytest.mark.slow
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


@pytest.mark.slow
def test_inflection_with_1_worker_finishes(inflection: Task, tmp_path: Path) -> None:
    outcome = execute(plan_for(inflection, tmp_path / "run", workers=1, think=0.05), quiet=True)
    assert outcome.stopped_because == "every worker finished"
    assert outcome.final is not None and (outcome.final.passed, outcome.final.total) == (455, 455)
    units = units_of(inflection)
    assert merges_per_unit(outcome.run_dir, units) == {u.id: 1 for u in units}
    assert query(outcome.run_dir, "SELECT COUNT(*) FROM claims")[0][0] == 12  # no yielding


@pytest.mark.slow
def test_a_worker_held_back_by_the_git_rate_limit_waits_and_finishes(
    inflection: Task, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A few git operations a unit: 30 a minute (one every 2 s) after a burst of 2 holds the
    # worker back many times; each time it waits as the hub says and goes on, claiming no unit
    # twice (a failed push used to end the session and leave the unit to be claimed again).
    monkeypatch.setenv("SWARM_RATE_GIT_PER_MINUTE", "30")
    monkeypatch.setenv("SWARM_RATE_BURST", "2")
    outcome = execute(plan_for(inflection, tmp_path / "run", workers=1, think=0.0), quiet=True)
    assert outcome.stopped_because == "every worker finished"
    assert outcome.final is not None and (outcome.final.passed, outcome.final.total) == (455, 455)
    units = units_of(inflection)
    assert merges_per_unit(outcome.run_dir, units) == {u.id: 1 for u in units}
    assert query(outcome.run_dir, "SELECT COUNT(*) FROM claims")[0][0] == 12
    log = "".join(p.read_text() for p in (outcome.run_dir / "workers" / "sessions").rglob("*"))
    assert "too many git operations" in log


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
    assert f"hidden tests on main: {passed}/{total}" in done.stdout


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


@pytest.mark.slow
def test_the_demo_runs_without_bubblewrap_and_says_so(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "swarm", "demo", "--think", "0.1", "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "SWARM_BWRAP_BIN": str(tmp_path / "no-bwrap-here")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "bubblewrap is not installed" in done.stderr
    assert "hidden tests on main: 49/49" in done.stdout
    assert 'sandbox = "none"' in (run_dir / "run.toml").read_text()
