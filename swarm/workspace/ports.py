"""The workspace port: one git repository, a branch and pull request per piece of work.

Adapters: `local` (a bare repository on disk, served through the hub) and `gitea`. Both keep the
same rules: workers push only to their own branches (`<worker>/...`), nobody pushes to `main`,
and `main` moves only by merging a pull request, atomically (compare-and-swap).

Pull requests follow branch protection as Gitea and GitHub have it: a worker opens PRs only from
its own branches; an approval counts only for the head it reviewed (a push dismisses it) and only
from a worker who is neither the branch's owner nor the PR's opener; a reviewer's requested
changes block the merge until that reviewer approves or the operator merges; only the PR's
author or the operator closes it; any worker may merge, and the merger is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from swarm.registry import Worker

PRState = Literal["open", "merged", "closed"]
Verdict = Literal["approve", "request_changes", "comment"]
MAIN = "main"
# The person with the operator token, where the port lets one act (close, merge overriding
# requested changes). Never a registered worker: their ids start at 1.
OPERATOR = Worker(0, "operator")


def branch_owner(branch: str) -> str:
    """The worker whose namespace a branch is in (`w3/parser` -> `w3`)."""
    return branch.partition("/")[0]


@dataclass(frozen=True)
class PullRequest:
    number: int
    title: str
    body: str
    author: str
    branch: str
    state: PRState
    created_at: float
    head: str  # the branch's commit when the PR was last read
    approvals: int = 0
    merged_at: float | None = None
    merged_by: str | None = None
    merge_commit: str | None = None
    closed_at: float | None = None
    # Open, and given up by its author (who died, or whose claim over its files ended without
    # a PATCH_SUMMARY): whoever claims its files may take it over or close it.
    abandoned: bool = False


@dataclass(frozen=True)
class Review:
    id: int
    number: int
    author: str
    verdict: Verdict
    body: str
    created_at: float


@dataclass(frozen=True)
class PullRequestDetail:
    pr: PullRequest
    diff: str  # the change against the merge base with main
    files: tuple[str, ...]
    reviews: tuple[Review, ...]
    mergeable: bool | None  # None when unknown (e.g. the branch is gone)
    conflicts: tuple[str, ...] = ()
    events: tuple[str, ...] = field(default_factory=tuple)  # merge attempts, conflicts, closes


class Workspace(Protocol):
    def clone_url(self, worker: Worker) -> str:
        """The URL `git clone` uses for this worker (credentials included where needed)."""
        ...

    def main_head(self) -> str: ...

    def open_pr(self, author: Worker, branch: str, title: str, body: str) -> PullRequest: ...

    def list_prs(
        self, *, state: PRState | None = None, author: str | None = None, limit: int = 50
    ) -> list[PullRequest]:
        """Newest first."""
        ...

    def get_pr(self, number: int) -> PullRequestDetail: ...

    def review(self, reviewer: Worker, number: int, verdict: Verdict, body: str) -> Review: ...

    def merge(self, worker: Worker, number: int) -> PullRequest:
        """Merge into main or raise MergeConflict (files named) / CheckFailed / Conflict."""
        ...

    def close(self, worker: Worker, number: int) -> PullRequest: ...
