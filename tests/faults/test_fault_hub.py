"""The hub killed (SIGKILL) during merges and started again on the same port, in real runs."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from swarm.tasks.demo import make_scale_task
from swarm.worker.run import Run
from tests.faults.faultkit import RunDB, assert_consistent, plan_for, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow]


@pytest.mark.parametrize("outage", [3.0, 30.0])
def test_a_hub_killed_during_merges_costs_no_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outage: float
) -> None:
    monkeypatch.setattr("swarm.worker.run.HUB_RESTARTS", 0)  # this test restarts it itself
    task = make_scale_task(tmp_path / "task", units=12)
    run = Run(plan_for(task, tmp_path / "run", workers=4, processes=2, think=0.5))
    db = RunDB(run.plan.run_dir)
    run.start()
    assert run.hub is not None and run.hub.process is not None
    try:
        wait_until(
            "merges under way",
            lambda: db.one("SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'") >= 3,
            timeout=120,
            every=0.05,
        )
        run.hub.process.send_signal(signal.SIGKILL)
        run.hub.process.wait()
        killed_at = time.monotonic()
        while time.monotonic() - killed_at < outage:
            assert run.poll() is None  # the panel goes on, with the last numbers
            time.sleep(0.5)
        assert run.hub_error
        run.hub.start()  # same port, same tokens
        back = time.monotonic()
        while (reason := run.poll()) is None:
            assert time.monotonic() - back < 180, "the run did not finish"
            time.sleep(0.5)
        outcome = run.stop(reason)
    except BaseException:
        run.stop("test failed")
        raise
    assert outcome.exit_code == 0, outcome.stopped_because
    assert outcome.restarts == 0  # no worker process died
    print(f"\nhub down {outage:.0f}s: no worker lost")
    assert outcome.final is not None and outcome.final.passed == outcome.final.total == 12
    assert db.one("SELECT COUNT(*) FROM workers") == 4
    assert db.one("SELECT COUNT(*) FROM workers WHERE state = 'dead'") == 0
    assert_consistent(db, task)


def test_swarm_run_starts_its_dead_hub_again(tmp_path: Path) -> None:
    task = make_scale_task(tmp_path / "task", units=12)
    run = Run(plan_for(task, tmp_path / "run", workers=4, processes=2, think=0.5))
    db = RunDB(run.plan.run_dir)
    run.start()
    assert run.hub is not None and run.hub.process is not None
    try:
        wait_until(
            "merges under way",
            lambda: db.one("SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'") >= 3,
            timeout=120,
            every=0.05,
        )
        first = run.hub.process
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed_at = time.monotonic()
        while (reason := run.poll()) is None:
            assert time.monotonic() - killed_at < 180, "the run did not finish"
            time.sleep(0.5)
        outcome = run.stop(reason)
    except BaseException:
        run.stop("test failed")
        raise
    assert run.hub.process is not first and run.hub_restarts == 1
    assert outcome.exit_code == 0 and outcome.restarts == 0, outcome.stopped_because
    assert outcome.final is not None and outcome.final.passed == outcome.final.total == 12
    assert db.one("SELECT COUNT(*) FROM workers") == 4
    assert_consistent(db, task)
