"""Pull requests nobody works on any more are marked abandoned, and closed once main holds them.

A PR stayed open for good when its author stopped working on it: the author died (marked by
swarm.hub.liveness), or the author's claim over the PR's files ended without a PATCH_SUMMARY:
a FAIL (the merge failed for good, the session failed on a full disk), a release, a lease that
lapsed. The hub's upkeep thread runs `sweep` every few seconds:

- an open PR whose author had such a claim end after the PR was opened, covering the PR's
  files, and holds no active claim over them now, gets an `abandoned` event: whoever claims its
  files may take it over (`sw pr take`, or a PR of their own, which supersedes it; see
  swarm.workspace.takeover) or close it; its author may still push to it and merge it;
- an abandoned PR whose merge would change nothing on main (a peer merged the same work) is
  closed by the hub, saying so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pygit2
from sqlalchemy import and_, exists, or_, select

from swarm.context import scope as scopes
from swarm.context.schema import claims
from swarm.workspace.schema import pr_events, pull_requests

if TYPE_CHECKING:
    from swarm.workspace.local import LocalWorkspace

GAVE_UP = ("failed", "released")  # end reasons of a claim given up (besides a lapse)


@dataclass
class Seen:
    """What the last sweeps looked at already, so a PR costs a diff only when it changed."""

    given_up: dict[int, tuple[str, int]] = field(default_factory=dict)  # (head, claims)
    merged: dict[int, tuple[str, str]] = field(default_factory=dict)  # (head, main)


def sweep(ws: LocalWorkspace, seen: Seen, now: float | None = None) -> tuple[list[int], list[int]]:
    """Mark abandoned the PRs given up since the last look; close abandoned PRs main holds.
    Returns (marked, closed)."""
    now = time.time() if now is None else now
    return _mark_given_up(ws, seen, now), _close_merged_elsewhere(ws, seen)


def _given_up_candidates(ws: LocalWorkspace, now: float) -> dict[int, list[tuple[str, ...]]]:
    """Open, unabandoned PRs whose author gave up a claim after opening them: number -> the
    scopes of those claims."""
    pr, claim = pull_requests, claims
    ended_after_open = or_(
        and_(
            claim.c.ended_at.is_not(None),
            claim.c.ended_at >= pr.c.created_at,
            or_(claim.c.end_reason.in_(GAVE_UP), claim.c.end_reason.like("lapsed%")),
        ),
        and_(
            claim.c.ended_at.is_(None),
            claim.c.lease_until < now,
            claim.c.lease_until >= pr.c.created_at,
        ),
    )
    marked = exists().where(pr_events.c.number == pr.c.number, pr_events.c.kind == "abandoned")
    query = (
        select(pr.c.number, claim.c.scope)
        .join(claim, claim.c.owner_id == pr.c.author_id)
        .where(pr.c.state == "open", ended_after_open, ~marked)
    )
    found: dict[int, list[tuple[str, ...]]] = {}
    with ws.db.read() as conn:
        for number, scope in conn.execute(query):
            found.setdefault(int(number), []).append(tuple(scope.split("\n")))
    return found


def _mark_given_up(ws: LocalWorkspace, seen: Seen, now: float) -> list[int]:
    candidates = _given_up_candidates(ws, now)
    marked = []
    for number, given_up in candidates.items():
        pr = ws.pr(number)
        if pr.state != "open" or pr.abandoned:
            continue
        if seen.given_up.get(number) == (pr.head, len(given_up)):
            continue  # looked at as it is, and its author still held it
        seen.given_up[number] = (pr.head, len(given_up))
        files = ws.changed_files(pr)
        if not files or not any(scopes.overlaps(s, files) for s in given_up):
            continue
        with ws.db.read() as conn:
            held = [
                tuple(row.split("\n"))
                for row in conn.execute(
                    select(claims.c.scope)
                    .join(pull_requests, pull_requests.c.author_id == claims.c.owner_id)
                    .where(
                        pull_requests.c.number == number,
                        claims.c.ended_at.is_(None),
                        claims.c.lease_until > now,
                    )
                ).scalars()
            ]
        if any(scopes.overlaps(s, files) for s in held):
            continue  # its author works on those files still
        ws.record_event(
            number,
            "hub",
            "abandoned",
            f"{pr.author}'s claim on its files ended without a PATCH_SUMMARY; whoever claims "
            f"them may take it over (sw pr take {number}) or close it",
        )
        marked.append(number)
    return marked


def _close_merged_elsewhere(ws: LocalWorkspace, seen: Seen) -> list[int]:
    with ws.db.read() as conn:
        numbers = list(
            conn.execute(
                select(pull_requests.c.number).where(
                    pull_requests.c.state == "open",
                    exists().where(
                        pr_events.c.number == pull_requests.c.number,
                        pr_events.c.kind == "abandoned",
                    ),
                )
            ).scalars()
        )
    closed = []
    main = ws.main_head()
    for number in numbers:
        pr = ws.pr(number)
        if pr.state != "open" or seen.merged.get(number) == (pr.head, main):
            continue
        seen.merged[number] = (pr.head, main)
        if _changes_nothing(ws.repository(), main, pr.head):
            ws.close_by_hub(number, "main already holds its changes (a peer merged them)")
            closed.append(number)
    return closed


def _changes_nothing(repo: pygit2.Repository, main: str, head: str) -> bool:
    """Merging `head` into main would leave main's files as they are (read only: nothing is
    written to the repository)."""
    try:
        ours = repo[pygit2.Oid(hex=main)].peel(pygit2.Commit)
        index = repo.merge_commits(ours.id, pygit2.Oid(hex=head))
    except (KeyError, ValueError, pygit2.GitError):
        return False
    return index.conflicts is None and len(index.diff_to_tree(ours.tree)) == 0
