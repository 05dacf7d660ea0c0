"""A run directory on a small tmpfs, filled: the hub refuses new work and recovers by itself."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from swarm.db import Database
from swarm.hub.server import BackgroundHub
from swarm.tasks.demo import make_scale_task
from swarm.tools.client import HubClient, HubError
from swarm.worker.run import Run
from tests.conftest import make_runtime
from tests.faults.faultkit import RunDB, assert_consistent, plan_for, wait_until

pytestmark = pytest.mark.faults


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave_mb: int) -> Path:
    """A file taking all but `leave_mb` of the disk's free space."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    filler = disk / "filler"
    with filler.open("wb") as handle:
        handle.truncate(0)
        chunk = b"\0" * 2**20
        for _ in range(max(0, free // 2**20 - leave_mb)):
            handle.write(chunk)
    return filler


def test_a_nearly_full_disk_refuses_new_work_and_recovers(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_MIN_FREE_MB", "32")
    db = Database(f"sqlite:///{small_disk / 'hub.db'}")
    db.create_schema()
    runtime = make_runtime(db, tmp_path, run_dir=small_disk)
    with BackgroundHub(runtime) as hub:
        with HubClient(hub.url, runtime.operator_token) as op:
            token = op.register()["token"]
        worker = HubClient(hub.url, token, retry_for=0)
        worker.call("POST", "/v1/sessions", json={"harness": "sim"})
        filler = fill(small_disk, leave_mb=16)
        time.sleep(1.1)  # the free-space reading is kept a second
        with pytest.raises(HubError) as refused:
            worker.call("POST", "/v1/sessions", json={"harness": "sim"})
        assert refused.value.status == 507
        assert "disk is nearly full" in refused.value.message
        opened = httpx.post(
            f"{hub.url}/v1/prs",
            json={"branch": "w1/x", "title": "x"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert opened.status_code == 507
        # Winding down still works: a FACT, a heartbeat.
        worker.record("FACT", "the disk is full")
        worker.call("POST", "/v1/status", json={"state": "idle", "status": {}})
        # Space comes back: so does new work, with nothing restarted. A waiting client that
        # retries gets through on its own.
        waiting = HubClient(hub.url, token, retry_for=30)
        filler.unlink()
        started = time.monotonic()
        waiting.call("POST", "/v1/sessions", json={"harness": "sim"})
        assert time.monotonic() - started < 10
        waiting.close()
        worker.close()
    db.dispose()


@pytest.mark.slow
def test_a_run_whose_disk_fills_mid_run_finishes_once_space_returns(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_MIN_FREE_MB", "24")
    task = make_scale_task(tmp_path / "task", units=12)
    run = Run(plan_for(task, small_disk / "run", workers=4, processes=2, think=0.5))
    db = RunDB(run.plan.run_dir)
    run.start()
    try:
        wait_until(
            "merges under way",
            lambda: db.one("SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'") >= 2,
            timeout=120,
            every=0.05,
        )
        filler = fill(small_disk, leave_mb=8)
        time.sleep(10)
        assert run.poll() is None
        filler.unlink()
        back = time.monotonic()
        while (reason := run.poll()) is None:
            assert time.monotonic() - back < 180, "the run did not finish"
            time.sleep(0.5)
        outcome = run.stop(reason)
    except BaseException:
        run.stop("test failed")
        raise
    assert outcome.exit_code == 0, outcome.stopped_because
    assert outcome.final is not None and outcome.final.passed == outcome.final.total == 12
    assert_consistent(db, task)
