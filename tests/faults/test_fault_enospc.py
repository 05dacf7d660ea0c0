"""The run directory on a small tmpfs filled to the last byte mid-run (true ENOSPC, past the
disk guard's threshold), during merges and pushes, for longer than the clients retry: sessions
fail as they did when this was found. The run must still finish with the full score and leave
everything sound and explained."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarm.tasks.demo import make_scale_task
from swarm.worker.run import Run
from swarm.worker.run_cli import print_outcome
from tests.faults.faultkit import Filler, RunDB, assert_consistent, plan_for, tmpfs, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow]

FULL_FOR = 25.0  # seconds: past the clients' retry time below, so sessions fail
RETRY_SECONDS = "5"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "small", "96m") as mounted:
        yield mounted


def test_a_run_whose_disk_fills_to_the_last_byte_finishes_sound_and_says_why(
    small_disk: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SWARM_MIN_FREE_MB", "16")  # the guard is on; the filler goes past it
    monkeypatch.setenv("SWARM_HUB_RETRY_SECONDS", RETRY_SECONDS)  # inherited by the workers
    task = make_scale_task(tmp_path / "task", units=12)
    forwarded: list[str] = []
    run = Run(plan_for(task, small_disk / "run", think=0.5), on_hub_line=forwarded.append)
    db = RunDB(run.plan.run_dir)
    merged = "SELECT COUNT(*) FROM pull_requests WHERE state = 'merged'"
    run.start()
    try:
        wait_until("merges under way", lambda: db.one(merged) >= 2, timeout=120, every=0.05)
        with Filler(small_disk):
            assert os.statvfs(small_disk).f_bavail == 0  # not a byte left
            at_fill = db.one(merged)
            ends = time.monotonic() + FULL_FOR
            while time.monotonic() < ends:
                assert run.poll() is None, "the run gave up on a full disk"
                time.sleep(0.5)
            summary = run.summary()
            assert summary["disk"]["full"], summary.get("disk")
        back = time.monotonic()
        writes_again = wait_until(
            "the hub to take writes again",
            lambda: not run.summary()["disk"]["full"],
            timeout=60,
            every=0.1,
        )
        next_merge = wait_until(
            "a merge after the disk emptied",
            lambda: db.one(merged) > max(at_fill, 2),
            timeout=120,
            every=0.1,
        )
        while (reason := run.poll()) is None:
            assert time.monotonic() - back < 240, "the run did not finish"
            time.sleep(0.5)
        finished = time.monotonic() - back
        # Nothing is left open for good: a PR given up was taken over or closed by the hub.
        wait_until(
            "no open PR left",
            lambda: db.one("SELECT COUNT(*) FROM pull_requests WHERE state = 'open'") == 0,
            timeout=30,
        )
        outcome = run.stop(reason)
    except BaseException:
        run.stop("test failed")
        raise
    with capsys.disabled():  # the figures docs/reliability.md quotes
        print(
            f"\nspace back -> the hub takes writes {writes_again:.1f} s, next merge "
            f"{next_merge:.1f} s, run finished {finished:.1f} s; disk {outcome.disk}"
        )
    assert outcome.exit_code == 0, outcome.stopped_because
    assert outcome.final is not None and outcome.final.passed == outcome.final.total == 12
    assert_consistent(db, task)
    # The sessions the full disk failed ended their claims with a FAIL saying why...
    fails = db.rows("SELECT body FROM entries WHERE type = 'FAIL'")
    assert fails and all("disk full: " in body for (body,) in fails), fails
    ended = db.rows("SELECT detail FROM sessions WHERE ended = 'error'")
    assert ended and all(detail.startswith("disk full: ") for (detail,) in ended), ended
    # ... and no live worker was taken for dead over the heartbeats the hub could not store.
    assert db.one("SELECT COUNT(*) FROM claims WHERE end_reason LIKE 'lapsed%'") == 0
    # The reason survived the full disk: in the database, in hub.log (written once space
    # returned), and forwarded out of the run directory while it was full.
    kept = db.rows("SELECT kind, message FROM hub_log WHERE kind != '' ORDER BY id")
    assert [kind for kind, _ in kept][:2] == ["disk_full", "disk_back"], kept
    assert "disk is full" in kept[0][1]
    assert "is full" in (run.plan.run_dir / "hub.log").read_text()
    assert any("ERROR swarm.hub.disk" in line and "is full" in line for line in forwarded)
    # The exit code and the summary say what happened.
    assert outcome.disk["episodes"] >= 1 and outcome.disk["full_seconds"] >= FULL_FOR / 2
    assert outcome.disk["refused"] > 0 and not outcome.disk["full"]
    print_outcome(outcome)
    said = capsys.readouterr().out
    assert "run finished (every worker finished)" in said
    assert "  disk: full " in said and "then the run went on" in said
