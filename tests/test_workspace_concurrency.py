"""Concurrent merges never lose a commit: the merge queue and main's compare-and-swap."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pygit2
import pytest
from test_workspace_support import git, make_branch, open_workspace

from swarm.db import Database
from swarm.errors import MergeConflict, Unavailable
from swarm.registry import Registry, Worker
from swarm.workspace.merge import MergeQueue, MergeRequest

pytest_plugins = ["test_workspace_support"]  # its fixtures: sqlite_db, registry, crew, ws


def _landed(git_dir: Path) -> list[int]:
    """PR numbers of the merge commits on main's first-parent line."""
    repo = pygit2.Repository(str(git_dir))
    walker = repo.walk(repo.references["refs/heads/main"].target)
    walker.simplify_first_parent()
    numbers = []
    for commit in walker:
        for line in commit.message.splitlines():
            if line.startswith("Swarm-PR: "):
                numbers.append(int(line.split(": ")[1]))
    return numbers


@pytest.mark.parametrize("batch", [True, False])
def test_64_prs_merged_by_16_threads_all_land_once(
    tmp_path: Path, sqlite_db: Database, registry: Registry, batch: bool
) -> None:
    ws = open_workspace(tmp_path, sqlite_db, batch=batch)
    people = [registry.register()[0] for _ in range(16)]
    heads = {}
    for n in range(64):
        author = people[n % 16]
        heads[n + 1] = make_branch(ws.path, f"{author.name}/f{n}", {f"f{n}.txt": f"{n}\n"})
        ws.open_pr(author, f"{author.name}/f{n}", f"file {n}", "")
    start = threading.Barrier(16)

    def merge_all(worker: Worker) -> list[int]:
        start.wait()
        done = []
        for number in range(1, 65):
            if (number - 1) % 16 == (worker.id - people[0].id):
                done.append(ws.merge(worker, number).number)
        return done

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(merge_all, people))
    assert sorted(n for r in results for n in r) == list(range(1, 65))
    assert sorted(_landed(ws.path)) == list(range(1, 65))
    repo = pygit2.Repository(str(ws.path))
    main = repo.references["refs/heads/main"].target
    tree = repo[main].peel(pygit2.Commit).tree
    for number, head in heads.items():
        assert repo.descendant_of(main, pygit2.Oid(hex=head))
        assert f"f{number - 1}.txt" in tree
        assert ws.get_pr(number).pr.merge_commit is not None
    assert git(ws.path, "fsck", "--strict", "--no-dangling").strip() == ""
    if batch:
        assert ws.queue.stats.batches < 64  # waiting merges were taken together
    ws.shutdown()


def test_a_conflicting_pr_in_a_batch_does_not_affect_the_others(
    tmp_path: Path, sqlite_db: Database, crew: list[Worker]
) -> None:
    ws = open_workspace(tmp_path, sqlite_db)
    alice, bob, carol = crew
    make_branch(ws.path, f"{alice.name}/a", {"app.py": "alice\n"})
    make_branch(ws.path, f"{bob.name}/b", {"app.py": "bob\n"})
    make_branch(ws.path, f"{carol.name}/c", {"c.txt": "carol\n"})
    queue = MergeQueue(ws.path)
    gate = threading.Lock()
    gate.acquire()
    # Hold the queue's thread on a first request so the next three arrive as one batch.
    make_branch(ws.path, "w9/first", {"first.txt": "1\n"})
    original = queue._process

    def held(repo: pygit2.Repository, batch: list[object]) -> None:
        if batch[0].request.number == 0:  # type: ignore[attr-defined]
            inside.set()
            with gate:
                pass
        original(repo, batch)  # type: ignore[arg-type]

    queue._process = held  # type: ignore[method-assign]
    inside = threading.Event()
    first = queue.submit(MergeRequest(0, "w9/first", "first", "w9", "w9"))
    assert inside.wait(10)
    futures = [
        queue.submit(MergeRequest(n, branch, branch, branch[:2], "w1"))
        for n, branch in ((1, f"{alice.name}/a"), (2, f"{bob.name}/b"), (3, f"{carol.name}/c"))
    ]
    again = queue.submit(MergeRequest(3, f"{carol.name}/c", "c", carol.name, "w1"))
    assert again is futures[2]  # the same PR twice in flight: one merge, one shared result
    gate.release()
    first.result()
    assert futures[0].result().commit and futures[2].result().commit
    with pytest.raises(MergeConflict) as refused:
        futures[1].result()
    assert refused.value.files == ["app.py"]
    assert queue.stats.largest_batch == 3 and queue.stats.merged == 3
    queue.close()
    with pytest.raises(Unavailable, match="shut down"):
        queue.submit(MergeRequest(4, "x", "x", "x", "x"))
    ws.shutdown()


def test_main_moved_by_someone_else_is_retried_by_compare_and_swap(
    tmp_path: Path, sqlite_db: Database, crew: list[Worker]
) -> None:
    ws = open_workspace(tmp_path, sqlite_db)
    alice, bob, _ = crew
    make_branch(ws.path, f"{alice.name}/a", {"a.txt": "a\n"})
    outsider = make_branch(ws.path, "outsider", {"o.txt": "o\n"})
    queue = MergeQueue(ws.path)
    original = queue._merge_one
    moved = []

    def racing(repo: pygit2.Repository, tip: pygit2.Oid, req: MergeRequest) -> object:
        if not moved:  # another writer moves main between our read and our swap
            git(ws.path, "update-ref", "refs/heads/main", outsider)
            moved.append(True)
        return original(repo, tip, req)

    queue._merge_one = racing  # type: ignore[assignment,method-assign]
    merged = queue.merge(MergeRequest(1, f"{alice.name}/a", "a", alice.name, bob.name))
    repo = pygit2.Repository(str(ws.path))
    commit = repo[pygit2.Oid(hex=merged.commit)].peel(pygit2.Commit)
    assert str(commit.parent_ids[0]) == outsider and queue.stats.cas_retries == 1
    assert ws.main_head() == merged.commit
    queue.close()
    ws.shutdown()
