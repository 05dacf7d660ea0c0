"""PostgreSQL backends of the hub terminated repeatedly during merges, in a real run."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from swarm.tasks.demo import make_scale_task
from swarm.worker.run import Run
from tests.faults.faultkit import RunDB, assert_consistent, plan_for, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.postgres]


def test_backends_terminated_during_merges_lose_and_double_nothing(
    tmp_path: Path, postgres_url: str, postgres_admin_url: str
) -> None:
    # Only this run's connections are terminated: the server is shared with other tests.
    name = f"swarm_fault_{uuid.uuid4().hex[:10]}"
    url = f"{postgres_url}&application_name={name}"
    task = make_scale_task(tmp_path / "task", units=24)
    run = Run(plan_for(task, tmp_path / "run", workers=4, processes=2, think=1.0,
                       database_url=url))  # fmt: skip
    db = RunDB(run.plan.run_dir, url)
    admin = create_engine(postgres_admin_url, isolation_level="AUTOCOMMIT")
    done = threading.Event()
    terminated: list[int] = []

    def terminate() -> None:
        while not done.wait(0.3):
            with admin.connect() as conn:
                killed = conn.execute(
                    text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE application_name = :name"
                    ),
                    {"name": name},
                ).scalar_one()
            terminated.append(int(killed))

    killer = threading.Thread(target=terminate, daemon=True)
    run.start()
    try:
        wait_until(
            "merges under way",
            lambda: db.one("SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'") >= 2,
            timeout=120,
        )
        killer.start()
        started = time.monotonic()
        while (reason := run.poll()) is None:
            if time.monotonic() - started > 20:
                done.set()  # the faults stop; the run must still finish
            assert time.monotonic() - started < 240, "the run did not finish"
            time.sleep(0.5)
        done.set()
        killer.join()
        outcome = run.stop(reason)
    except BaseException:
        done.set()
        run.stop("test failed")
        raise
    finally:
        admin.dispose()
    assert sum(terminated) >= 10, terminated  # the fault really happened, many times
    hits = (run.plan.run_dir / "hub.log").read_text().count("AdminShutdown")
    print(f"\n{sum(terminated)} backends terminated; {hits} hub errors from it, all ridden out")
    assert outcome.exit_code == 0, outcome.stopped_because
    assert outcome.restarts == 0
    assert outcome.final is not None and outcome.final.passed == outcome.final.total == 24
    assert_consistent(db, task)
