"""The set of commits reachable from main, kept by the merge thread so merge bases cost no walk.

libgit2 finds a merge base by walking main's history back to the branch's fork point, which
grows with every merge (2-3 ms after a few hundred). Knowing main's ancestry, the base of a
branch is found by walking only the branch's own new commits.
"""

from __future__ import annotations

import pygit2

WALK_LIMIT = 10_000  # a branch with more new commits than this takes libgit2's own algorithm


class Ancestry:
    """Commits reachable from `tip`; valid only while main is `tip` (else `reset`)."""

    def __init__(self) -> None:
        self.tip: pygit2.Oid | None = None
        self.known: set[pygit2.Oid] = set()

    def follow(self, repo: pygit2.Repository, tip: pygit2.Oid) -> None:
        """Make the set describe `tip`, rebuilding it when main moved in a way we did not see."""
        if tip == self.tip:
            return
        self.known = {commit.id for commit in repo.walk(tip, pygit2.enums.SortMode.NONE)}
        self.tip = tip

    def reset(self) -> None:
        self.tip = None
        self.known = set()

    def base(
        self, repo: pygit2.Repository, head: pygit2.Oid
    ) -> tuple[pygit2.Oid | None, set[pygit2.Oid]]:
        """The best merge base with main (None: not unique) and the branch's new commits."""
        if head in self.known:
            return head, set()
        new: set[pygit2.Oid] = set()
        boundary: set[pygit2.Oid] = set()
        stack = [head]
        while stack:
            oid = stack.pop()
            if oid in new or oid in boundary:
                continue
            if oid in self.known:
                boundary.add(oid)
                continue
            new.add(oid)
            if len(new) > WALK_LIMIT:
                return None, new
            stack.extend(repo[oid].peel(pygit2.Commit).parent_ids)
        # Every path from head into main's history meets it at a boundary commit; with a single
        # one, every common ancestor lies behind it, so it is the best merge base.
        return (boundary.pop() if len(boundary) == 1 else None), new

    def add(self, tip: pygit2.Oid, commits: set[pygit2.Oid]) -> None:
        """Main advanced to `tip` (a merge commit) bringing `commits` with it."""
        self.known |= commits
        self.known.add(tip)
        self.tip = tip
