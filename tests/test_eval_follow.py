"""Evaluation follows main: a run scores main after its merges (coalesced), keeps each hidden
test's outcome, and the hub, dashboard and report say which tests still fail and since when."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from swarm.evaluation.history import still_failing
from swarm.hub.server import BackgroundHub
from swarm.tasks import apply_unit, load_units
from swarm.tasks.demo import make_scale_task
from swarm.tools.client import HubClient, HubError


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute(sql).fetchall()


@pytest.mark.slow  # about 30 s on 2 cores: CI runs it with `-m slow`
def test_a_run_scores_main_after_merges_and_keeps_every_tests_outcome(tmp_path: Path) -> None:
    task = make_scale_task(tmp_path / "task", units=12)
    run_dir = tmp_path / "run"
    # --eval-every 10m: every score but the last one comes from following main's merges; 3 s
    # of work per unit leaves the scorer (about a second a scoring) time to see most states.
    done = subprocess.run(
        [sys.executable, "-m", "swarm", "run", str(task.root), "--workers", "2", "--think", "3",
         "--eval-every", "10m", "--run-dir", str(run_dir), "--quiet"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    db = run_dir / "hub.db"
    scored = rows(
        db,
        "SELECT c.time, c.duration, c.[commit], c.passed, r.status, r.tests FROM checkpoints c "
        "JOIN checkpoint_results r ON r.checkpoint_id = c.id ORDER BY c.time, c.id",
    )
    main_line = subprocess.run(
        ["git", "-C", str(run_dir / "workspace.git"), "log", "--first-parent", "--format=%H",
         "main"], capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    commits = [c for _t, _d, c, *_ in scored]
    assert set(commits) <= set(main_line)
    # The start and the end of main, and states in between: a curve, not one dot.
    assert commits[0] == main_line[-1] and commits[-1] == main_line[0]
    assert len(set(commits)) >= 4, commits
    passed = [p for _t, _d, _c, p, *_ in scored]
    assert passed == sorted(passed) and passed[0] == 0 and passed[-1] == 12
    for (t1, d1, *_), (t2, *_) in itertools.pairwise(scored):
        assert t1 + d1 <= t2 + 0.01  # one scoring at a time
    for _t, _d, _c, count, status, tests in scored:
        outcomes = json.loads(tests)
        assert status == "scored" and len(outcomes) == 12
        assert sum(o == "passed" for o in outcomes.values()) == count
    report = subprocess.run(
        [sys.executable, "-m", "swarm", "report", str(run_dir), "-o", str(tmp_path / "r.html")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-2000:]
    assert "hidden tests failing: **0 of 12**" in (tmp_path / "r.md").read_text()


def test_still_failing_says_since_when_each_test_fails() -> None:
    def tests(**outcomes: str) -> str:
        return json.dumps({f"t.py::{k}": v for k, v in outcomes.items()})

    history = still_failing([
        (10.0, "c1", "scored", tests(a="failed", b="failed", c="passed")),
        (20.0, "c2", "scored", tests(a="passed", b="failed", c="failed")),
        (25.0, "c3", "tampered", tests(a="failed", b="passed", c="passed")),  # says nothing
        (30.0, "c4", "error", "{}"),
        (40.0, "c5", "scored", tests(a="passed", b="error", c="failed")),
    ])  # fmt: skip
    assert (history["tests"], history["passing"], history["scored_at"]) == (3, 1, 40.0)
    assert [(f["test"], f["outcome"], f["since"], f["since_commit"], f["ever_passed"])
            for f in history["failing"]] == [
        ("t.py::b", "error", 10.0, "c1", False),
        ("t.py::c", "failed", 20.0, "c2", True),
    ]  # fmt: skip
    assert still_failing([]) == {"scored_at": None, "tests": 0, "passing": 0, "failing": []}


def test_the_hub_keeps_per_test_results_and_answers_what_still_fails(
    hub: BackgroundHub, operator: HubClient
) -> None:
    for when, outcome in ((1.0, "failed"), (2.0, "passed"), (3.0, "failed")):
        operator.call("POST", "/v1/checkpoints", json={
            "time": when, "commit": f"{int(when):040x}", "passed": int(outcome == "passed"),
            "total": 2, "tests": {"h.py::x": outcome, "h.py::y": "passed"}})  # fmt: skip
    failing = operator.call("GET", "/v1/checkpoints/failing")["result"]
    assert failing["failing"] == [{"test": "h.py::x", "outcome": "failed", "since": 3.0,
                                   "since_commit": f"{3:040x}", "ever_passed": True}]  # fmt: skip
    listed = operator.call("GET", "/v1/checkpoints")["result"]["checkpoints"]
    statuses = [c["status"] for c in listed]
    assert statuses == ["scored"] * 3
    with pytest.raises(HubError) as refused:
        operator.call(
            "POST",
            "/v1/checkpoints",
            json={
                "time": 4.0,
                "commit": "x",
                "passed": 0,
                "total": 0,
                "tests": {"h.py::x": "maybe"},
            },
        )
    assert refused.value.status == 422 and "tests.h.py::x: Input should be" in str(refused.value)
    assert len(operator.call("GET", "/v1/checkpoints")["result"]["checkpoints"]) == 3


def test_the_evaluator_service_scores_each_merge_and_records_it_with_the_hub(
    hub: BackgroundHub, operator: HubClient, tmp_path: Path
) -> None:
    task = make_scale_task(tmp_path / "task", units=2)
    bare, clone = tmp_path / "shared.git", tmp_path / "clone"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c",
           "init.defaultBranch=main"]  # fmt: skip
    subprocess.run([*git, "init", "-q", "--bare", str(bare)], check=True)
    shutil.copytree(task.start_dir, clone)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "start"],
                 ["push", "-q", str(bare), "main"]):  # fmt: skip
        subprocess.run([*git, *args], cwd=clone, check=True, capture_output=True)
    env = {**os.environ, "SWARM_OPERATOR_TOKEN": hub.runtime.operator_token}
    service = subprocess.Popen(
        [sys.executable, "-m", "swarm", "eval", str(task.root), "--repo", str(bare), "--hub",
         hub.url, "--every", "600", "--workdir", str(tmp_path / "ev")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip

    def recorded() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = operator.call("GET", "/v1/checkpoints")["result"][
            "checkpoints"
        ]
        return rows

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 60
        while len(recorded()) < count and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(recorded()) >= count, recorded()

    try:
        wait_for(1)  # main as it started
        for unit in load_units(task):
            apply_unit(unit, clone)
        subprocess.run([*git, "commit", "-qam", "both units"], cwd=clone, check=True)
        subprocess.run([*git, "push", "-q", str(bare), "main"], cwd=clone, check=True)
        wait_for(2)  # the merge, long before --every
    finally:
        service.send_signal(signal.SIGTERM)
        out, _ = service.communicate(timeout=60)
    assert service.returncode == 0, out
    rows = recorded()
    assert [(r["passed"], r["total"]) for r in rows[:2]] == [(0, 2), (2, 2)]
    assert rows[-1]["commit"] == rows[1]["commit"]  # and the score on stop
    failing = operator.call("GET", "/v1/checkpoints/failing")["result"]
    assert (failing["tests"], failing["failing"]) == (2, [])
