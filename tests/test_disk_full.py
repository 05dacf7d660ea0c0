"""A disk filled to the last byte (a real tmpfs, true ENOSPC), part by part: git writes are
checked and leave the repository sound, a refused write is a clear 507, the reason is kept, and
everything goes on by itself once space returns."""

from __future__ import annotations

import errno
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest
from sqlalchemy import select

from swarm.db import Database
from swarm.diskfull import is_disk_full, text_says_full
from swarm.errors import StorageFull
from swarm.hub.diskguard import DiskWatch
from swarm.hub.hublog import hub_log
from swarm.hub.liveness import Upkeep
from swarm.hub.server import BackgroundHub
from swarm.registry import Registry
from swarm.tools.client import HubClient, HubError
from swarm.worker.runtime import WorkerOptions, WorkerRuntime
from swarm.workspace.local import LocalWorkspace
from swarm.workspace.repo import configure, init_repo
from tests.conftest import FakeClock, make_runtime
from tests.faults.faultkit import Filler, fsck, tmpfs, wait_until
from tests.test_workspace_support import make_branch

SQLITE = ["sqlite"]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "16m") as mounted:
        yield mounted


def _seed(tmp_path: Path) -> Path:
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "a.txt").write_text("a\n")
    return seed


def test_the_workspace_repository_keeps_no_reflog(tmp_path: Path) -> None:
    """A reflog entry appended by a ref update that then failed pointed at a commit never
    written: `git fsck --strict` failed for good. The repository keeps none, and drops the
    reflogs of a run made before."""
    repo = tmp_path / "workspace.git"
    init_repo(repo, _seed(tmp_path))
    assert not (repo / "logs").exists()
    assert pygit2.Repository(str(repo)).config["core.logAllRefUpdates"] == "false"
    dangling = repo / "logs" / "refs" / "heads" / "main"
    dangling.parent.mkdir(parents=True)
    missing = "1" * 40
    when = int(time.time())
    dangling.write_text(f"{'0' * 40} {missing} swarm <swarm@localhost> {when} +0000\tmerge\n")
    assert fsck(repo).returncode != 0
    configure(repo)  # what every hub start does
    assert not (repo / "logs").exists()
    assert fsck(repo).returncode == 0


@pytest.mark.parametrize("db_url", SQLITE, indirect=True)
def test_a_merge_on_a_full_disk_moves_nothing_and_goes_through_once_space_returns(
    disk: Path, tmp_path: Path, db: Database
) -> None:
    ws = LocalWorkspace.create(disk / "workspace.git", _seed(tmp_path), db)
    try:
        author = Registry(db).register()[0]
        make_branch(ws.path, f"{author.name}/b", {"b.txt": "b\n" * 200})
        number = ws.open_pr(author, f"{author.name}/b", "add b", "").number
        before = ws.main_head()
        with Filler(disk):
            # libgit2 answers a commit id for a commit it did not write: checked, refused.
            with pytest.raises(StorageFull, match="main did not move"):
                ws.merge(author, number)
            assert ws.main_head() == before
            assert ws.pr(number).state == "open"
            checked = fsck(ws.path)
            assert checked.returncode == 0, checked.stderr
            assert not (ws.path / "logs").exists()
        merged = ws.merge(author, number)  # no restart: the same queue, the same thread
        assert merged.state == "merged" and ws.main_head() == merged.merge_commit
        checked = fsck(ws.path)
        assert checked.returncode == 0, checked.stderr
    finally:
        ws.shutdown()


def _clone(hub: BackgroundHub, token: str, where: Path) -> Path:
    header = f"http.extraHeader=Authorization: Bearer {token}"
    url = f"{hub.url}/git/workspace.git"
    subprocess.run(["git", "clone", "-q", "-c", header, url, str(where)], check=True)
    for key, value in (("user.name", "w1"), ("user.email", "w1@swarm.invalid")):
        subprocess.run(["git", "-C", str(where), "config", key, value], check=True)
    return where


@pytest.mark.parametrize("db_url", SQLITE, indirect=True)
def test_a_push_to_a_full_disk_fails_cleanly_and_works_once_space_returns(
    disk: Path, tmp_path: Path, db: Database
) -> None:
    runtime = make_runtime(db, tmp_path, run_dir=disk / "run")
    with BackgroundHub(runtime) as hub:
        with HubClient(hub.url, runtime.operator_token) as op:
            token = op.register()["token"]
        checkout = _clone(hub, token, tmp_path / "checkout")
        (checkout / "big.txt").write_text("".join(f"line {i} of a change\n" for i in range(3000)))
        subprocess.run(["git", "-C", str(checkout), "add", "big.txt"], check=True)
        subprocess.run(["git", "-C", str(checkout), "commit", "-qm", "big"], check=True)
        git_dir = disk / "run" / "workspace.git"

        def push() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["git", "-C", str(checkout), "push", "origin", "HEAD:refs/heads/w1/big"],
                capture_output=True,
                text=True,
            )

        with Filler(disk):
            refused = push()
            assert refused.returncode != 0
            assert text_says_full(refused.stderr + refused.stdout), refused.stderr
            assert pygit2.Repository(str(git_dir)).references.get("refs/heads/w1/big") is None
            checked = fsck(git_dir)
            assert checked.returncode == 0, checked.stderr
            with HubClient(hub.url, runtime.operator_token) as op:
                told = op.call("GET", "/v1/summary")["result"]["disk"]
            assert told["full"] and "a push by w1 failed" in told["last_error"], told
        pushed = push()
        assert pushed.returncode == 0, pushed.stderr
        assert pygit2.Repository(str(git_dir)).references.get("refs/heads/w1/big") is not None
        checked = fsck(git_dir)
        assert checked.returncode == 0, checked.stderr


def test_a_write_the_full_disk_refuses_is_a_clear_507_and_the_hub_recovers(
    disk: Path, tmp_path: Path
) -> None:
    db = Database(f"sqlite:///{disk / 'hub.db'}")
    db.create_schema()
    runtime = make_runtime(db, tmp_path, run_dir=disk)
    try:
        with BackgroundHub(runtime) as hub, HubClient(hub.url, runtime.operator_token) as op:
            token = op.register()["token"]
            worker = HubClient(hub.url, token, retry_for=0)
            worker.record("FACT", "before")
            with Filler(disk):
                with pytest.raises(HubError) as refused:
                    worker.record("FACT", "while the disk is full " * 200)
                assert refused.value.status == 507
                assert refused.value.payload["kind"] == "StorageFull"
                assert "disk is full" in refused.value.message
                assert "nothing was changed" in refused.value.message
                disk_now = op.call("GET", "/v1/summary")["result"]["disk"]
                assert disk_now["full"] and disk_now["episodes"] == 1
                assert "database or disk is full" in disk_now["last_error"]
                # Reads still answer: the panel, `sw claims`, the dashboard.
                assert op.call("GET", "/v1/claims")["result"]["claims"] == []
            waiting = HubClient(hub.url, token, retry_for=30)
            waiting.record("FACT", "after")  # no restart: the same hub takes it

            def taken_again() -> bool:
                waiting.record("OBSERVED", "tick")  # writes that go through end it
                return not op.call("GET", "/v1/summary")["result"]["disk"]["full"]

            wait_until("the hub to say the disk takes writes", taken_again, 30, every=0.5)
            waiting.close()
            worker.close()

            def kept() -> list[tuple[str, str]]:
                with db.read() as conn:
                    rows = conn.execute(select(hub_log.c.kind, hub_log.c.message)).all()
                return [(r.kind, r.message) for r in rows if r.kind]

            # The reason, written once the database took writes again.
            wait_until("the disk's lines in hub_log", lambda: len(kept()) >= 2, timeout=30)
            kinds = [kind for kind, _ in kept()]
            assert kinds[:2] == ["disk_full", "disk_back"]
            assert "database or disk is full" in kept()[0][1]
    finally:
        db.dispose()


def test_a_failed_sessions_fail_waits_for_the_hub_and_ends_its_claims(
    disk: Path, tmp_path: Path
) -> None:
    db = Database(f"sqlite:///{disk / 'hub.db'}")
    db.create_schema()
    runtime = make_runtime(db, tmp_path, run_dir=disk)
    try:
        with BackgroundHub(runtime) as hub:
            with HubClient(hub.url, runtime.operator_token) as op:
                identity = op.register()
            client = HubClient(hub.url, identity["token"], retry_for=0)
            claim = client.record("CLAIM", "unit 1", scope=["src/one.py"])["result"]["entry"]
            worker = WorkerRuntime(
                WorkerOptions(hub.url, "unused", tmp_path / "workers", "goal", identity=identity)
            )
            worker.name = identity["name"]
            with Filler(disk):
                worker.fail_claims(client, 1, "disk full: OSError: [Errno 28] No space left")
                assert [kind for kind, _ in worker.unsent] == ["fail"]
                with pytest.raises(HubError):
                    worker.send_unsent(client)  # still full: it keeps waiting
                assert worker.unsent
            worker.send_unsent(client)
            assert worker.unsent == []
            ended = client.call("GET", "/v1/claims", params={"mine": True, "all": True})
            (state,) = [c["state"] for c in ended["result"]["claims"] if c["id"] == claim["id"]]
            assert state == "failed"
            fails = client.call("GET", "/v1/grep", params={"pattern": "No space", "type": "FAIL"})
            (fail,) = fails["result"]["entries"]
            assert "session 1 failed: disk full" in fail["body"]
            client.close()
    finally:
        db.dispose()


def test_a_full_disk_is_told_from_other_failures(disk: Path) -> None:
    repo = pygit2.init_repository(str(disk / "r.git"), bare=True)
    with Filler(disk):
        with pytest.raises(OSError) as written:
            (disk / "more").write_bytes(b"x" * 8192)
        assert is_disk_full(written.value)
        conn = sqlite3.connect(disk / "x.db")
        with pytest.raises(sqlite3.OperationalError) as stored:
            conn.execute("CREATE TABLE t (x TEXT)")
            conn.execute("INSERT INTO t VALUES (?)", ("x" * 100_000,))
            conn.commit()
        conn.close()
        assert is_disk_full(stored.value)
        with pytest.raises((OSError, pygit2.GitError)) as blob:
            repo.create_blob(b"y" * 100_000)
        # libgit2 may say "no error": the disk under the repository tells.
        assert is_disk_full(blob.value, disk)
    assert not is_disk_full(pygit2.GitError("no error"), disk)
    assert not is_disk_full(FileNotFoundError(errno.ENOENT, "gone"))
    assert not is_disk_full(sqlite3.OperationalError("database is locked"))
    assert not is_disk_full(RuntimeError("git push: rejected"))


def test_heartbeats_lost_to_a_full_disk_do_not_make_workers_dead(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'hub.db'}")
    db.create_schema()
    clock = FakeClock()
    runtime = make_runtime(db, tmp_path, clock=clock, dead_after=30)
    watch = DiskWatch(tmp_path, clock=clock)
    upkeep = Upkeep(runtime, disk=watch)
    clock.advance(60)
    assert clock() - upkeep.heard_since() >= 30  # silence can be judged
    watch.failed("POST /v1/status: database or disk is full")
    clock.advance(5)
    watch.wrote()  # space is back
    assert not watch.full
    # The heartbeats of the full minute were lost, not missing: judged from the recovery on.
    assert upkeep.heard_since() == clock() - 5
    clock.advance(26)
    assert clock() - upkeep.heard_since() >= 30
    db.dispose()


@pytest.mark.parametrize("db_url", SQLITE, indirect=True)
def test_sessions_a_full_disk_failed_are_not_taken_for_a_broken_setup(
    hub: BackgroundHub, operator: HubClient
) -> None:
    from swarm.worker.run import broken_setup

    token = operator.register()["token"]
    with HubClient(hub.url, token) as worker:

        def failed_session(detail: str) -> None:
            started = worker.call("POST", "/v1/sessions", json={"harness": "sim"})["result"]
            end = {"ended": "error", "detail": detail}
            worker.call("POST", f"/v1/sessions/{started['id']}/end", json=end)

        for _ in range(4):
            failed_session("disk full: HubError: the hub's disk is full (under /run)")
        summary = operator.call("GET", "/v1/summary")["result"]
        assert summary["sessions"]["disk_full"] == 4
        assert broken_setup(summary) is None  # the run waits for space
        for _ in range(3):
            failed_session("AuthenticationError: the API key is not valid")
        summary = operator.call("GET", "/v1/summary")["result"]
        assert broken_setup(summary) == (
            "no session succeeded: 7 failed; w1: AuthenticationError: the API key is not valid"
        )
