"""Worker processes killed with SIGKILL, or paused with SIGSTOP past their lease, in real runs."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from swarm.tasks.demo import make_scale_task
from swarm.worker.run import Run
from tests.faults.faultkit import RunDB, assert_consistent, plan_for, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def test_a_killed_worker_process_is_restarted_as_the_same_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`swarm run` starts the killed process again; it takes up the same worker identities,
    releases what they held at once, and the run finishes as if nothing happened."""
    task = make_scale_task(tmp_path / "task", units=12)
    run = Run(plan_for(task, tmp_path / "run", workers=4, processes=2, think=3.0))
    db = RunDB(run.plan.run_dir)
    run.start()
    try:
        wait_until(
            "claims held in both processes",
            lambda: (
                db.one("SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'") >= 2
                and db.one("SELECT COUNT(DISTINCT owner_id) FROM claims WHERE ended_at IS NULL")
                >= 3
            ),
            timeout=120,
        )
        victim = run.workers[0]
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        killed_at = time.time()
        held = db.rows("SELECT id, scope FROM claims WHERE ended_at IS NULL")
        while run.poll() is None:
            assert time.time() - killed_at < 180, "the run did not go on"
            time.sleep(0.5)
        outcome = run.stop("every worker finished")
    except BaseException:
        run.stop("test failed")
        raise
    assert outcome.restarts == 1 and outcome.exit_code == 0, outcome.stopped_because
    assert outcome.final is not None and outcome.final.passed == outcome.final.total == 12
    assert db.one("SELECT COUNT(*) FROM workers") == 4  # the same identities, none new
    pickups = []
    for claim_id, scope in held:
        again = db.one(
            "SELECT MIN(created_at) FROM claims WHERE scope = ? AND id > ?", scope, claim_id
        )
        if again is not None:
            pickups.append(round(again - killed_at, 1))
    print(f"\nrecovery (restarted process): units claimed again after {sorted(pickups)} s")
    assert_consistent(db, task)


def test_a_killed_worker_process_is_declared_dead_and_its_units_taken_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No restart: default liveness settings (dead after 30 s, heartbeats every 10 s) and a
    300 s lease; the units the killed workers held are claimed by others within 45 s."""
    monkeypatch.setattr("swarm.worker.run.WORKER_RESTARTS", 0)
    task = make_scale_task(tmp_path / "task", units=12)
    run = Run(plan_for(task, tmp_path / "run", workers=4, processes=2, think=3.0))
    db = RunDB(run.plan.run_dir)
    run.start()
    try:
        # The kill comes once every unit left is claimed and the victim holds some of them:
        # the others are then idle, so the pickup time is the hub's and not a queue's.
        identities = run.plan.run_dir / "workers" / "identities-1.json"

        def all_claimed_victim_holds() -> bool:
            if not identities.exists():
                return False
            names = [i["name"] for i in json.loads(identities.read_text())]
            merged = db.one("SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'")
            open_claims = db.rows(
                "SELECT w.name FROM claims c JOIN workers w ON w.id = c.owner_id "
                "WHERE c.ended_at IS NULL"
            )
            held = sum(1 for (name,) in open_claims if name in names)
            return merged + len(open_claims) >= 12 and held >= 1

        wait_until("every unit left claimed", all_claimed_victim_holds, timeout=150, every=0.05)
        victim = run.workers[0]
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        killed_at = time.time()
        while (reason := run.poll()) is None:
            assert time.time() - killed_at < 180, "the run did not go on"
            time.sleep(0.5)
        outcome = run.stop(reason)
    except BaseException:
        run.stop("test failed")
        raise
    # The work was finished by the others, and the outcome says a process died.
    assert outcome.restarts == 0 and outcome.exit_code == 1
    assert outcome.stopped_because.startswith("workers died (process 1: signal 9")
    assert outcome.final is not None and outcome.final.passed == outcome.final.total == 12
    # The killed process's workers were declared dead and their claims ended by the hub.
    dead = db.rows("SELECT id, name FROM workers WHERE state = 'dead'")
    assert len(dead) == 2, dead
    ended = db.rows(
        "SELECT id, scope, ended_at FROM claims WHERE end_reason = 'lapsed (worker dead)'"
    )
    assert ended
    # Each of those units was claimed again by a live worker, within the 45 s target.
    pickups = []
    for claim_id, scope, _ended_at in ended:
        again = db.one(
            "SELECT MIN(created_at) FROM claims WHERE scope = ? AND id > ?", scope, claim_id
        )
        if again is not None:
            pickups.append(again - killed_at)
    freed = sorted(round(ended_at - killed_at, 1) for _c, _s, ended_at in ended)
    print(f"\nrecovery: claims of the killed workers ended {freed} s after the kill")
    assert pickups and max(pickups) < 45, pickups
    print(f"\nrecovery: units of the killed worker claimed again after {sorted(pickups)} s")
    lost = db.one("SELECT COUNT(*) FROM sessions WHERE ended = 'lost'")
    assert lost >= 1
    assert_consistent(db, task)


def test_every_worker_process_killed_past_its_restarts_ends_the_run_as_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("swarm.worker.run.WORKER_RESTARTS", 1)
    task = make_scale_task(tmp_path / "task", units=12)
    run = Run(plan_for(task, tmp_path / "run", workers=2, processes=2, think=5.0))
    db = RunDB(run.plan.run_dir)
    run.start()
    try:
        for _round in range(2):  # the first kill is restarted, the second is final
            wait_until(
                "every worker in a session",
                lambda: (
                    db.one("SELECT COUNT(*) FROM sessions WHERE ended_at IS NULL") >= 2
                    and all(p.poll() is None for p in run.workers)
                ),
                timeout=60,
            )
            for proc in run.workers:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            reason = run.poll()
        assert reason is not None and reason.startswith("workers died"), reason
        outcome = run.stop(reason)
    except BaseException:
        run.stop("test failed")
        raise
    assert outcome.exit_code == 1 and outcome.restarts == 2
    assert "signal 9" in outcome.stopped_because


def test_a_worker_paused_past_its_lease_cannot_land_late_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGSTOP for longer than the lease (not long enough to be declared dead): whatever the
    paused worker does on waking, no unit is merged twice and its lapsed claims stay lapsed."""
    monkeypatch.setenv("SWARM_CLAIM_LEASE_SECONDS", "6")
    task = make_scale_task(tmp_path / "task", units=12)
    run = Run(plan_for(task, tmp_path / "run", workers=2, processes=2, think=1.0))
    db = RunDB(run.plan.run_dir)
    run.start()
    try:
        wait_until(
            "a claim in each process",
            lambda: (
                db.one("SELECT COUNT(DISTINCT owner_id) FROM claims WHERE ended_at IS NULL") >= 2
            ),
            timeout=60,
            every=0.05,
        )
        victim = run.workers[0]
        os.killpg(victim.pid, signal.SIGSTOP)
        time.sleep(15)  # 2.5 leases, half the time after which it would be declared dead
        os.killpg(victim.pid, signal.SIGCONT)
        started = time.time()
        while run.poll() is None:
            assert time.time() - started < 180, "the run did not finish"
            time.sleep(0.5)
        outcome = run.stop(run.poll() or "every worker finished")
    except BaseException:
        run.stop("test failed")
        raise
    assert outcome.exit_code == 0, outcome.stopped_because
    assert outcome.final is not None and outcome.final.passed == outcome.final.total == 12
    # No PATCH_SUMMARY completed a lapsed claim: each completion came before its lease ended.
    late = db.one(
        "SELECT COUNT(*) FROM claims c JOIN entries e ON e.id = c.ended_by "
        "WHERE c.end_reason = 'completed' AND e.created_at > c.lease_until"
    )
    assert late == 0
    assert_consistent(db, task)
