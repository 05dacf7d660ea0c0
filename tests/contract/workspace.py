"""The workspace contract: checks every adapter of `swarm.workspace.ports.Workspace` must pass."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from swarm.errors import Conflict, Forbidden, InvalidInput, MergeConflict
from swarm.registry import Worker
from swarm.workspace.ports import OPERATOR, Workspace

# (worker, branch, files (None deletes), base branch or None for the branch itself) -> commit
Push = Callable[[Worker, str, dict[str, str | None], str | None], str]


@dataclass
class WorkspaceHarness:
    """An adapter under test whose main holds README.md, a way to make workers, and a push."""

    workspace: Workspace
    new_worker: Callable[[], Worker]
    push: Push
    cleanup: list[Callable[[], None]] = field(default_factory=list)


def _branch(h: WorkspaceHarness, w: Worker, topic: str, files: dict[str, str | None]) -> str:
    name = f"{w.name}/{topic}"
    h.push(w, name, files, "main")
    return name


def pull_request_round_trip(h: WorkspaceHarness) -> None:
    a = h.new_worker()
    assert isinstance(h.workspace.clone_url(a), str)
    start = h.workspace.main_head()
    branch = _branch(h, a, "parser", {"parser.py": "print('parse')\n"})
    pr = h.workspace.open_pr(a, branch, "Add the parser", "first cut")
    assert (pr.author, pr.branch, pr.state, pr.title) == (a.name, branch, "open", "Add the parser")
    detail = h.workspace.get_pr(pr.number)
    assert detail.files == ("parser.py",) and "print('parse')" in detail.diff
    assert detail.mergeable is True and detail.conflicts == ()
    merged = h.workspace.merge(a, pr.number)
    assert merged.state == "merged" and merged.merged_by == a.name and merged.merge_commit
    assert h.workspace.main_head() != start
    with pytest.raises(Conflict):
        h.workspace.merge(a, pr.number)


def listing_is_newest_first_and_filters(h: WorkspaceHarness) -> None:
    a, b = h.new_worker(), h.new_worker()
    first = h.workspace.open_pr(a, _branch(h, a, "one", {"a1.txt": "1\n"}), "one", "")
    second = h.workspace.open_pr(b, _branch(h, b, "two", {"b1.txt": "2\n"}), "two", "")
    numbers = [p.number for p in h.workspace.list_prs()]
    assert numbers.index(second.number) < numbers.index(first.number)
    assert [p.number for p in h.workspace.list_prs(author=a.name)] == [first.number]
    h.workspace.close(b, second.number)
    assert [p.number for p in h.workspace.list_prs(state="closed")] == [second.number]
    assert second.number not in [p.number for p in h.workspace.list_prs(state="open")]
    assert len(h.workspace.list_prs(limit=1)) == 1


def reviews_count_and_self_approval_is_refused(h: WorkspaceHarness) -> None:
    a, b = h.new_worker(), h.new_worker()
    pr = h.workspace.open_pr(a, _branch(h, a, "rev", {"r.txt": "r\n"}), "reviewed", "")
    with pytest.raises(Forbidden):
        h.workspace.review(a, pr.number, "approve", "looks good to me")
    review = h.workspace.review(b, pr.number, "approve", "ok")
    assert (review.author, review.verdict, review.number) == (b.name, "approve", pr.number)
    h.workspace.review(b, pr.number, "comment", "one more thought")
    detail = h.workspace.get_pr(pr.number)
    assert detail.pr.approvals == 1
    assert [r.verdict for r in detail.reviews] == ["approve", "comment"]
    with pytest.raises(InvalidInput):
        h.workspace.review(b, pr.number, "maybe", "?")  # type: ignore[arg-type]


def conflicting_merge_names_the_files(h: WorkspaceHarness) -> None:
    a, b = h.new_worker(), h.new_worker()
    one = h.workspace.open_pr(a, _branch(h, a, "x", {"README.md": "from a\n"}), "a", "")
    two = h.workspace.open_pr(b, _branch(h, b, "x", {"README.md": "from b\n"}), "b", "")
    h.workspace.merge(a, one.number)
    before = h.workspace.main_head()
    with pytest.raises(MergeConflict) as refused:
        h.workspace.merge(b, two.number)
    assert refused.value.files == ["README.md"]
    assert h.workspace.main_head() == before
    detail = h.workspace.get_pr(two.number)
    assert detail.mergeable is False and detail.conflicts == ("README.md",)
    assert detail.pr.state == "open"


def closed_pull_request_cannot_merge(h: WorkspaceHarness) -> None:
    a = h.new_worker()
    pr = h.workspace.open_pr(a, _branch(h, a, "gone", {"g.txt": "g\n"}), "closing", "")
    closed = h.workspace.close(a, pr.number)
    assert closed.state == "closed"
    with pytest.raises(Conflict):
        h.workspace.merge(a, pr.number)
    with pytest.raises(Conflict):
        h.workspace.close(a, pr.number)


def concurrent_merges_all_land(h: WorkspaceHarness) -> None:
    workers = [h.new_worker() for _ in range(4)]
    prs = [
        (w, h.workspace.open_pr(w, _branch(h, w, "c", {f"{w.name}.txt": "x\n"}), "c", ""))
        for w in workers
    ]
    errors: list[BaseException] = []

    def merge(w: Worker, number: int) -> None:
        try:
            h.workspace.merge(w, number)
        except BaseException as exc:  # collected and re-raised by the test
            errors.append(exc)

    threads = [threading.Thread(target=merge, args=(w, pr.number)) for w, pr in prs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(h.workspace.get_pr(pr.number).pr.state == "merged" for _w, pr in prs)


def prs_open_only_from_your_own_branches(h: WorkspaceHarness) -> None:
    a, b = h.new_worker(), h.new_worker()
    branch = _branch(h, a, "mine", {"m.txt": "m\n"})
    with pytest.raises(Forbidden):
        h.workspace.open_pr(b, branch, "not b's", "")
    assert h.workspace.list_prs() == []
    pr = h.workspace.open_pr(a, branch, "a's own", "")  # not blocked by b's attempt
    assert (pr.author, pr.branch) == (a.name, branch)


def only_the_author_or_the_operator_closes(h: WorkspaceHarness) -> None:
    a, b = h.new_worker(), h.new_worker()
    pr = h.workspace.open_pr(a, _branch(h, a, "keep", {"k.txt": "k\n"}), "keep", "")
    with pytest.raises(Forbidden):
        h.workspace.close(b, pr.number)
    assert h.workspace.get_pr(pr.number).pr.state == "open"
    assert h.workspace.close(OPERATOR, pr.number).state == "closed"


def a_push_dismisses_earlier_approvals(h: WorkspaceHarness) -> None:
    a, b = h.new_worker(), h.new_worker()
    branch = _branch(h, a, "stale", {"s.txt": "harmless\n"})
    pr = h.workspace.open_pr(a, branch, "stale", "")
    h.workspace.review(b, pr.number, "approve", "harmless")
    assert h.workspace.get_pr(pr.number).pr.approvals == 1
    h.push(a, branch, {"s.txt": "something else\n"}, None)
    assert h.workspace.get_pr(pr.number).pr.approvals == 0
    h.workspace.review(b, pr.number, "approve", "looked again")
    assert h.workspace.get_pr(pr.number).pr.approvals == 1


def requested_changes_block_until_approved_or_overridden(h: WorkspaceHarness) -> None:
    a, b = h.new_worker(), h.new_worker()
    one = h.workspace.open_pr(a, _branch(h, a, "rc1", {"rc1.txt": "1\n"}), "one", "")
    h.workspace.review(b, one.number, "request_changes", "needs a test")
    with pytest.raises(Conflict):
        h.workspace.merge(a, one.number)
    assert h.workspace.get_pr(one.number).pr.state == "open"
    h.workspace.review(b, one.number, "approve", "fine now")
    assert h.workspace.merge(a, one.number).state == "merged"
    two = h.workspace.open_pr(a, _branch(h, a, "rc2", {"rc2.txt": "2\n"}), "two", "")
    h.workspace.review(b, two.number, "request_changes", "no")
    assert h.workspace.merge(OPERATOR, two.number).state == "merged"


WORKSPACE_CONTRACT = [
    prs_open_only_from_your_own_branches,
    only_the_author_or_the_operator_closes,
    a_push_dismisses_earlier_approvals,
    requested_changes_block_until_approved_or_overridden,
    pull_request_round_trip,
    listing_is_newest_first_and_filters,
    reviews_count_and_self_approval_is_refused,
    conflicting_merge_names_the_files,
    closed_pull_request_cannot_merge,
    concurrent_merges_all_land,
]
