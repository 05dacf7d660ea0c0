"""The embedded workspace: pull requests, reviews, merges, checks and bad input, on real git."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest
from test_workspace_support import Clone, git, make_branch, open_workspace

from swarm.db import Database
from swarm.errors import CheckFailed, Conflict, Forbidden, InvalidInput, MergeConflict, NotFound
from swarm.registry import Registry, Worker
from swarm.workspace.local import LocalWorkspace
from swarm.workspace.merge import MergeRequest

pytest_plugins = ["test_workspace_support"]  # its fixtures: sqlite_db, registry, crew, ws


def test_create_seeds_main_with_the_task_files(ws: LocalWorkspace) -> None:
    repo = pygit2.Repository(str(ws.path))
    head = repo[pygit2.Oid(hex=ws.main_head())].peel(pygit2.Commit)
    assert head.author.name == "swarm" and head.author.email == "swarm@localhost"
    assert sorted(e.name for e in head.tree) == ["README.md", "app.py", "bin"]
    run_sh = head.tree["bin"].peel(pygit2.Tree)["run.sh"]
    assert run_sh.filemode == pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
    assert ws.clone_url(Worker(1, "w1")) == str(ws.path)


def test_create_again_keeps_the_repository(tmp_path: Path, sqlite_db: Database) -> None:
    first = open_workspace(tmp_path, sqlite_db)
    make_branch(first.path, "w1/x", {"x.txt": "x\n"})
    again = open_workspace(tmp_path, sqlite_db, hub_url="http://hub:1/")
    assert again.main_head() == first.main_head()
    assert again.clone_url(Worker(1, "w1")) == "http://hub:1/git/workspace.git"


def test_pull_request_lifecycle(ws: LocalWorkspace, crew: list[Worker]) -> None:
    alice, bob, _ = crew
    head = make_branch(ws.path, f"{alice.name}/readme", {"README.md": "# demo\nmore\n"})
    pr = ws.open_pr(alice, f"refs/heads/{alice.name}/readme", "  Extend the readme ", "why")
    assert (pr.number, pr.title, pr.state, pr.head, pr.author) == (
        1, "Extend the readme", "open", head, alice.name
    )  # fmt: skip
    detail = ws.get_pr(1)
    assert detail.files == ("README.md",) and "+more" in detail.diff
    assert detail.mergeable is True and detail.conflicts == ()
    assert [p.number for p in ws.list_prs(state="open", author=alice.name)] == [1]
    assert ws.list_prs(author=bob.name) == []

    before = ws.main_head()
    merged = ws.merge(bob, 1)
    assert (merged.state, merged.merged_by, merged.head) == ("merged", bob.name, head)
    assert merged.merge_commit == ws.main_head()
    repo = pygit2.Repository(str(ws.path))
    commit = repo[pygit2.Oid(hex=ws.main_head())].peel(pygit2.Commit)
    assert [str(p) for p in commit.parent_ids] == [before, head]
    assert "PR #1" in commit.message and "Extend the readme" in commit.message
    assert alice.name in commit.message
    assert ws.list_prs(state="open") == [] and len(ws.list_prs(state="merged")) == 1
    shown = ws.get_pr(1)
    assert "+more" in shown.diff and shown.mergeable is None
    kinds = [e.split(" ", 3)[3].split(":")[0] for e in shown.events]
    assert kinds == ["opened", "merged"]

    with pytest.raises(Conflict, match="already merged"):
        ws.merge(alice, 1)
    with pytest.raises(Conflict, match="only open PRs"):
        ws.review(bob, 1, "approve", "")
    with pytest.raises(Conflict, match="already merged"):
        ws.close(alice, 1)


def test_bad_input_is_refused_and_changes_nothing(
    ws: LocalWorkspace, crew: list[Worker], registry: Registry
) -> None:
    alice, bob, _ = crew
    make_branch(ws.path, f"{alice.name}/a", {"a.txt": "a\n"})
    with pytest.raises(InvalidInput, match="title is empty"):
        ws.open_pr(alice, f"{alice.name}/a", "   ", "")
    with pytest.raises(NotFound, match="never pushed"):
        ws.open_pr(alice, f"{alice.name}/nope", "t", "")
    with pytest.raises(InvalidInput, match="not main"):
        ws.open_pr(alice, "main", "t", "")
    git(ws.path, "update-ref", f"refs/heads/{alice.name}/old", ws.main_head())
    with pytest.raises(Conflict, match="nothing that main"):
        ws.open_pr(alice, f"{alice.name}/old", "t", "")
    first = ws.open_pr(alice, f"{alice.name}/a", "t", "")
    with pytest.raises(Conflict, match="already exists"):
        ws.open_pr(alice, f"{alice.name}/a", "again", "")
    # The same PR opened again by its author (a retry whose answer was lost) is that PR.
    assert ws.open_pr(alice, f"{alice.name}/a", "t", "").number == first.number
    for call in (lambda: ws.get_pr(99), lambda: ws.merge(bob, 99), lambda: ws.close(bob, 99)):
        with pytest.raises(NotFound, match="no PR #99"):
            call()
    with pytest.raises(NotFound, match="no worker named"):
        ws.list_prs(author="w999")
    with pytest.raises(InvalidInput, match="unknown state"):
        ws.list_prs(state="bogus")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="unknown verdict"):
        ws.review(bob, 1, "lgtm", "")  # type: ignore[arg-type]
    assert [p.number for p in ws.list_prs()] == [1]
    assert ws.get_pr(1).reviews == ()


def test_reviews_and_required_approvals(tmp_path: Path, sqlite_db: Database,
                                        crew: list[Worker]) -> None:  # fmt: skip
    ws = open_workspace(tmp_path, sqlite_db, required_approvals=2)
    alice, bob, carol = crew
    make_branch(ws.path, f"{alice.name}/f", {"f.txt": "f\n"})
    ws.open_pr(alice, f"{alice.name}/f", "feature", "")
    with pytest.raises(Forbidden, match="own PR"):
        ws.review(alice, 1, "approve", "")
    with pytest.raises(InvalidInput, match="needs a body"):
        ws.review(bob, 1, "comment", " ")
    ws.review(alice, 1, "comment", "ready for review")
    ws.review(bob, 1, "request_changes", "rename f")
    ws.review(carol, 1, "approve", "")
    with pytest.raises(Conflict, match=r"1 of the 2 approvals.*1 more"):
        ws.merge(alice, 1)
    ws.review(bob, 1, "approve", "renamed, fine")
    assert ws.get_pr(1).pr.approvals == 2
    assert [r.verdict for r in ws.get_pr(1).reviews] == [
        "comment", "request_changes", "approve", "approve"
    ]  # fmt: skip
    assert ws.merge(alice, 1).state == "merged"
    ws.shutdown()


def test_closed_pull_request(ws: LocalWorkspace, crew: list[Worker]) -> None:
    alice, bob, _ = crew
    make_branch(ws.path, f"{alice.name}/c", {"c.txt": "c\n"})
    ws.open_pr(alice, f"{alice.name}/c", "to close", "")
    with pytest.raises(Forbidden, match="only its author"):
        ws.close(bob, 1)
    closed = ws.close(alice, 1)
    assert closed.state == "closed" and closed.closed_at is not None
    before = ws.main_head()
    with pytest.raises(Conflict, match="is closed; open a new PR"):
        ws.merge(alice, 1)
    with pytest.raises(Conflict, match="already closed"):
        ws.close(alice, 1)
    assert ws.main_head() == before
    assert ws.open_pr(alice, f"{alice.name}/c", "reopened", "").number == 2


def test_conflict_then_resolution(ws: LocalWorkspace, crew: list[Worker], tmp_path: Path) -> None:
    alice, bob, _ = crew
    a = Clone(str(ws.path), tmp_path / "a", alice.name)
    b = Clone(str(ws.path), tmp_path / "b", bob.name)
    a.write("app.py", "".join(f"line {i}{' alice' if i == 3 else ''}\n" for i in range(10)))
    a.commit("alice edits line 3")
    a.push(f"{alice.name}/edit")
    b.write("app.py", "".join(f"line {i}{' bob' if i == 3 else ''}\n" for i in range(10)))
    b.commit("bob edits line 3")
    b.push(f"{bob.name}/edit")
    ws.open_pr(alice, f"{alice.name}/edit", "alice's edit", "")
    ws.open_pr(bob, f"{bob.name}/edit", "bob's edit", "")
    ws.merge(alice, 1)
    before = ws.main_head()
    with pytest.raises(MergeConflict, match=r"app\.py\. Merge main into your branch") as refused:
        ws.merge(bob, 2)
    assert refused.value.files == ["app.py"] and ws.main_head() == before
    detail = ws.get_pr(2)
    assert detail.mergeable is False and detail.conflicts == ("app.py",)
    assert any("conflict: app.py" in e for e in detail.events)

    b.git("fetch", "-q", "origin")
    assert "CONFLICT" in b.git("merge", "origin/main", check=False)
    b.write("app.py", "".join(f"line {i}{' both' if i == 3 else ''}\n" for i in range(10)))
    b.commit("merge main, keep both edits")
    b.push(f"{bob.name}/edit")
    assert ws.get_pr(2).mergeable is True
    merged = ws.merge(bob, 2)
    assert merged.state == "merged"
    repo = pygit2.Repository(str(ws.path))
    text = repo.revparse_single("main:app.py").peel(pygit2.Blob).data.decode()
    assert "line 3 both" in text
    assert git(ws.path, "fsck", "--strict").strip() == ""


def test_merge_check(tmp_path: Path, sqlite_db: Database, crew: list[Worker]) -> None:
    ws = open_workspace(
        tmp_path, sqlite_db, merge_check="test -x bin/run.sh && ! grep -q broken app.py"
    )
    alice, bob, _ = crew
    make_branch(ws.path, f"{alice.name}/bad", {"app.py": "broken\n"})
    make_branch(ws.path, f"{bob.name}/good", {"good.txt": "good\n"})
    ws.open_pr(alice, f"{alice.name}/bad", "breaks it", "")
    ws.open_pr(bob, f"{bob.name}/good", "fine", "")
    before = ws.main_head()
    with pytest.raises(CheckFailed, match="failed \\(exit 1\\)"):
        ws.merge(bob, 1)
    assert ws.main_head() == before and ws.get_pr(1).pr.state == "open"
    assert ws.merge(alice, 2).state == "merged"
    ws.shutdown()

    noisy = open_workspace(tmp_path, sqlite_db, merge_check="echo checking; echo oops >&2; exit 3")
    make_branch(ws.path, f"{bob.name}/more", {"more.txt": "more\n"})
    noisy.open_pr(bob, f"{bob.name}/more", "more", "")
    with pytest.raises(CheckFailed) as failed:
        noisy.merge(alice, 3)
    assert "checking" in failed.value.output and "oops" in failed.value.output
    noisy.shutdown()


def test_a_merge_interrupted_before_the_pr_row_is_reconciled(
    tmp_path: Path, sqlite_db: Database, crew: list[Worker]
) -> None:
    ws = open_workspace(tmp_path, sqlite_db)
    alice, bob, _ = crew
    make_branch(ws.path, f"{alice.name}/r", {"r.txt": "r\n"})
    ws.open_pr(alice, f"{alice.name}/r", "crash test", "")
    # Main moves, then the hub dies before it records the PR as merged.
    merged = ws.queue.merge(MergeRequest(1, f"{alice.name}/r", "crash test", alice.name, bob.name))
    assert ws.get_pr(1).pr.state == "open"
    ws.shutdown()

    restarted = LocalWorkspace(ws.path, sqlite_db)
    pr = restarted.get_pr(1).pr
    assert (pr.state, pr.merge_commit, pr.merged_by) == ("merged", merged.commit, bob.name)
    with pytest.raises(Conflict, match="already merged"):
        restarted.merge(alice, 1)
    restarted.shutdown()


def test_pushes_outside_ones_namespace_are_refused(
    ws: LocalWorkspace, crew: list[Worker], tmp_path: Path
) -> None:
    alice, bob, _ = crew
    clone = Clone(str(ws.path), tmp_path / "a", alice.name)
    clone.write("x.txt", "x\n")
    clone.commit("x")
    before = ws.main_head()
    refusals = {
        "main": "nobody pushes to main",
        f"{bob.name}/x": "belongs to another worker",
        "refs/tags/v1": "tags are not allowed",
        "topic": f"you push only to refs/heads/{alice.name}/<topic>",
        alice.name: f"you push only to refs/heads/{alice.name}/<topic>",
    }
    for ref, message in refusals.items():
        output = clone.push(ref, check=False)
        assert message in output and "pre-receive hook declined" in output, output
    assert ws.main_head() == before
    clone.env = {}
    assert "push through the hub" in clone.push(f"{alice.name}/x", check=False)
    clone.env = {"REMOTE_USER": alice.name}
    clone.push(f"{alice.name}/x")
    clone.git("push", "origin", f":refs/heads/{alice.name}/x")  # deleting one's own branch
    assert "refs/heads/" not in git(ws.path, "for-each-ref", f"refs/heads/{alice.name}")


@pytest.mark.postgres
def test_pull_requests_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    db = Database(postgres_url)
    db.create_schema()
    alice, bob = Registry(db).register()[0], Registry(db).register()[0]
    ws = open_workspace(tmp_path, db, required_approvals=1)
    for n in range(3):
        make_branch(ws.path, f"{alice.name}/p{n}", {f"p{n}.txt": f"{n}\n"})
        assert ws.open_pr(alice, f"{alice.name}/p{n}", f"change {n}", "").number == n + 1
    with pytest.raises(Conflict, match="already exists"):
        ws.open_pr(alice, f"{alice.name}/p0", "dup", "")
    ws.review(bob, 1, "approve", "")
    assert ws.merge(bob, 1).state == "merged"
    ws.close(alice, 2)  # only its author (or the operator) closes it
    assert [p.state for p in ws.list_prs()] == ["open", "closed", "merged"]
    assert ws.get_pr(1).pr.approvals == 1
    ws.shutdown()
    db.dispose()
