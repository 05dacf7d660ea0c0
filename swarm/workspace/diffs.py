"""What a pull request changes: its diff against main's merge base, and whether it merges."""

from __future__ import annotations

import pygit2

from swarm.workspace.ports import PullRequest

DIFF_LIMIT = 200_000


def inspect(
    repo: pygit2.Repository, pr: PullRequest
) -> tuple[str, tuple[str, ...], bool | None, tuple[str, ...]]:
    """The diff against the merge base with main, its files, and whether it merges cleanly."""
    main = pygit2.Oid(hex=str(repo.references["refs/heads/main"].target))
    if pr.state == "merged" and pr.merge_commit:
        merge = repo[pygit2.Oid(hex=pr.merge_commit)].peel(pygit2.Commit)
        diff = repo.diff(merge.parents[0], merge)
        return _diff_text(diff), _diff_files(diff), None, ()
    head = pygit2.Oid(hex=pr.head)  # for an open PR, the branch's head when it was read
    try:
        base = repo.merge_base(main, head)
        diff = repo.diff(base or repo.TreeBuilder().write(), head)
    except (KeyError, pygit2.GitError):
        return "(the branch's commits are gone)", (), None, ()
    if pr.state != "open":
        return _diff_text(diff), _diff_files(diff), None, ()
    index = repo.merge_commits(main, head)
    conflicts = ()
    if index.conflicts is not None:
        conflicts = tuple(sorted({e.path for t in index.conflicts for e in t if e}))
    return _diff_text(diff), _diff_files(diff), not conflicts, conflicts


def _diff_text(diff: pygit2.Diff) -> str:
    patch = diff.patch or ""
    if len(patch) > DIFF_LIMIT:
        return patch[:DIFF_LIMIT] + f"\n[diff truncated at {DIFF_LIMIT} characters]\n"
    return patch


def _diff_files(diff: pygit2.Diff) -> tuple[str, ...]:
    return tuple(sorted({d.new_file.path or d.old_file.path for d in diff.deltas}))


def changed_files(repo: pygit2.Repository, head: str) -> tuple[str, ...]:
    """The paths a branch at `head` changes against its merge base with main."""
    main = pygit2.Oid(hex=str(repo.references["refs/heads/main"].target))
    tip = pygit2.Oid(hex=head)
    try:
        base = repo.merge_base(main, tip)
        return _diff_files(repo.diff(base or repo.TreeBuilder().write(), tip))
    except (KeyError, ValueError, pygit2.GitError):
        return ()
