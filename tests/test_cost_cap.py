"""The run-wide cost cap: past it the run raises a flag, and workers start no new session."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from conftest import make_runtime

from swarm.db import Database
from swarm.harness import SessionContext, SessionResult
from swarm.hub.server import BackgroundHub, free_port
from swarm.tasks.demo import make_demo_task
from swarm.tools.client import HubClient
from swarm.worker.run import Run, RunPlan
from swarm.worker.runtime import WorkerOptions, WorkerRuntime


class CountingHarness:
    """A harness that spends a dollar per session and counts its sessions."""

    name = "counting"

    def __init__(self) -> None:
        self.sessions = 0

    def run_session(self, ctx: SessionContext) -> SessionResult:
        self.sessions += 1
        return SessionResult("submitted", steps=1, cost=1.0)


def test_cost_cap_stops_new_sessions(db: Database, tmp_path: Path) -> None:
    port = free_port()  # the workspace's clone URL names the hub's real port
    with BackgroundHub(make_runtime(db, tmp_path, port=port), port=port) as hub:
        check_cost_cap(hub, tmp_path)


def check_cost_cap(hub: BackgroundHub, tmp_path: Path) -> None:
    runtime = hub.runtime
    spender, _token = runtime.registry.register()
    session, _number = runtime.run.start_session(spender.id, "counting", None)
    runtime.run.end_session(
        spender.id, session, ended="submitted", steps=1, tokens_in=0, tokens_out=0, cost=5.0
    )
    plan = RunPlan(task=make_demo_task(tmp_path / "task"), run_dir=tmp_path / "run", max_cost=1.0)
    run = Run(plan)
    run.operator = HubClient(hub.url, runtime.operator_token)
    alive = subprocess.Popen(["sleep", "30"])
    run.workers = [alive]
    try:
        assert run.poll() is None  # the run goes on, but ...
        assert runtime.run.flags().get("no_new_sessions") == "1"  # ... no new sessions
        # Once its workers finished their sessions, the run ends saying why (not as a failure).
        finished = subprocess.Popen(["true"])
        finished.wait()
        run.workers = [finished]
        assert run.poll() == "cost cap reached ($1.00)" and run.failure is None
    finally:
        alive.kill()
        alive.wait()
        run.operator.close()

    harness = CountingHarness()
    worker = WorkerRuntime(
        WorkerOptions(
            hub_url=hub.url,
            join_token=runtime.operator_token,
            workdir_root=tmp_path / "workers",
            goal="g",
            harness="counting",
            max_sessions=3,  # without the cap it would run three sessions
        ),
        stop=threading.Event(),
        harness=harness,
    )
    totals = worker.run()
    assert harness.sessions == 0 and totals.sessions == 0
    assert worker.status["stopped_because"] == "cost cap"


def test_summary_counts_failed_sessions_and_names_failing_workers(
    db: Database, tmp_path: Path
) -> None:
    """What the panel shows and what stops a run in which no session ever succeeded."""
    runtime = make_runtime(db, tmp_path)
    run = runtime.run
    failing, _ = runtime.registry.register()
    recovered, _ = runtime.registry.register()
    for worker, ending, detail in [
        (failing, "error", "AuthenticationError: Incorrect API key provided"),
        (recovered, "error", "APIConnectionError: refused"),
        (recovered, "submitted", "done"),
        (failing, "error", "AuthenticationError: Incorrect API key provided (again)"),
    ]:
        session, _ = run.start_session(worker.id, "mini", "openai/x")
        run.end_session(
            worker.id, session, ended=ending, steps=1, tokens_in=0, tokens_out=0, cost=0.0,
            detail=detail,
        )  # fmt: skip
    run.start_session(recovered.id, "mini", "openai/x")  # still running
    summary = run.summary()
    assert summary["sessions"] == {
        "total": 5,
        "running": 1,
        "failed": 3,
        "disk_full": 0,
        "succeeded": 1,
    }
    assert summary["failing"] == [
        {
            "worker": failing.name,
            "detail": "AuthenticationError: Incorrect API key provided (again)",
        }
    ]
