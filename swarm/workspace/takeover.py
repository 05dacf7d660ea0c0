"""Taking over an abandoned pull request: whoever takes its unit (claims its files) continues it.

An abandoned PR (swarm.workspace.abandon: its author died or gave up its claim) is open to the
worker that takes the work up next, in either of two ways:

- `take_over` (`sw pr take N`): the hub copies the PR's branch to one of the taker's own
  (`<taker>/<same topic>`, or the taker's pushed branch given with --branch), opens a PR from it
  with the same title, and closes the abandoned one; each PR's events link to the other;
- `supersede`, when the taker opens a PR of its own (`sw pr open`) that changes some of the same
  files: the abandoned PRs it covers are closed, linked to the new one.

Either way the taker must hold an active claim over some of the abandoned PR's files: that is
what taking the unit means, and it keeps a peer from closing work it does not take up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pygit2
from sqlalchemy import exists, select, update

from swarm.context import scope as scopes
from swarm.errors import Conflict, Forbidden, InvalidInput, NotFound, SwarmError
from swarm.registry import Worker
from swarm.workspace.local import BODY_LIMIT
from swarm.workspace.ports import OPERATOR, PullRequest, branch_owner
from swarm.workspace.schema import pr_events, pull_requests

if TYPE_CHECKING:
    from swarm.workspace.local import LocalWorkspace

Scopes = Sequence[Sequence[str]]


def take_over(
    ws: LocalWorkspace,
    taker: Worker,
    number: int,
    scopes_held: Scopes,
    *,
    branch: str | None = None,
    max_branches: int = 0,
) -> PullRequest:
    """Continue abandoned PR `number` as `taker`'s: a PR from the taker's branch (copied from
    the abandoned head unless `branch` names one the taker pushed); the old one is closed."""
    if taker == OPERATOR:
        raise Forbidden("the operator has no branches; a worker that claims the work takes it")
    old = ws.pr(number)
    _check_takeable(ws, taker, old, scopes_held)
    target = (branch or "").strip().removeprefix("refs/heads/") or _default_branch(taker, old)
    if branch_owner(target) != taker.name or not pygit2.reference_is_valid_name(
        f"refs/heads/{target}"
    ):
        raise InvalidInput(f"{target!r} is not a branch of yours; give one as {taker.name}/<topic>")
    repo = ws.repository()
    ref = f"refs/heads/{target}"
    if branch is None:
        if repo.references.get(ref) is not None:
            raise Conflict(
                f"you already have a branch {target}; push PR #{number}'s commits to a branch of "
                f"yours (git fetch origin {old.branch} && git push origin FETCH_HEAD:"
                f"{taker.name}/<topic>) and give it: sw pr take {number} --branch "
                f"{taker.name}/<topic>"
            )
        _check_branch_quota(repo, taker, max_branches)
        repo.references.create(ref, pygit2.Oid(hex=old.head))
    elif repo.references.get(ref) is None:
        raise NotFound(f"branch {target} was never pushed; push it first, then take #{number}")
    if not _close_for(ws, old, taker):
        raise Conflict(f"PR #{number} was closed, merged or taken meanwhile; look again")
    try:
        new = _open_or_adopt(ws, taker, target, old)
    except SwarmError:
        _reopen(ws, old)  # nothing replaced it: it stays open, abandoned
        raise
    _link(ws, old, new, taker)
    return new


def supersede(
    ws: LocalWorkspace, opener: Worker, new: PullRequest, scopes_held: Scopes
) -> list[int]:
    """Close the abandoned PRs of others that `new` covers (it changes some of their files and
    its author claims them); returns their numbers."""
    if opener == OPERATOR or not scopes_held:
        return []
    with ws.db.read() as conn:
        numbers = list(
            conn.execute(
                select(pull_requests.c.number).where(
                    pull_requests.c.state == "open",
                    pull_requests.c.author != opener.name,
                    exists().where(
                        pr_events.c.number == pull_requests.c.number,
                        pr_events.c.kind == "abandoned",
                    ),
                )
            ).scalars()
        )
    if not numbers:
        return []
    mine = set(ws.changed_files(new))
    closed = []
    for number in numbers:
        old = ws.pr(number)
        files = ws.changed_files(old)
        if not mine.intersection(files) or not _claims_any(scopes_held, files):
            continue
        if _close_for(ws, old, opener):
            _link(ws, old, new, opener)
            closed.append(number)
    return closed


def _check_takeable(ws: LocalWorkspace, taker: Worker, old: PullRequest, held: Scopes) -> None:
    if old.state != "open":
        raise Conflict(f"PR #{old.number} is {old.state}; only an open PR can be taken over")
    if old.author == taker.name:
        raise Conflict(
            f"PR #{old.number} is yours already: push to {old.branch} and merge it (sw pr merge "
            f"{old.number})"
        )
    if not old.abandoned:
        raise Forbidden(
            f"PR #{old.number} is {old.author}'s and not abandoned (its author works on it, as "
            f"far as the hub knows); DM {old.author} to agree who finishes it"
        )
    files = ws.changed_files(old)
    if not _claims_any(held, files):
        shown = " ".join(files[:5]) or "<its files>"
        raise Forbidden(
            f"claim PR #{old.number}'s work first (sw claim {shown} -m 'take over "
            f"#{old.number}'): whoever takes the unit takes its PR"
        )


def _claims_any(held: Scopes, files: Sequence[str]) -> bool:
    return bool(files) and any(scopes.overlaps(scope, files) for scope in held)


def _default_branch(taker: Worker, old: PullRequest) -> str:
    topic = old.branch.partition("/")[2] or f"pr-{old.number}"
    return f"{taker.name}/{topic}"


def _check_branch_quota(repo: pygit2.Repository, taker: Worker, limit: int) -> None:
    if limit <= 0:
        return
    prefix = f"refs/heads/{taker.name}/"
    have = sum(1 for name in repo.references if name.startswith(prefix))
    if have + 1 > limit:
        raise Conflict(
            f"taking it over would leave you {have + 1} branches; the limit is {limit} per "
            f"worker (SWARM_GIT_MAX_REFS_PER_WORKER). Delete merged ones: git push origin "
            f"--delete {taker.name}/<topic>"
        )


def _open_or_adopt(ws: LocalWorkspace, taker: Worker, branch: str, old: PullRequest) -> PullRequest:
    body = f"Takes over #{old.number} by {old.author} (abandoned).\n\n{old.body}"
    body = body.strip()[:BODY_LIMIT]  # the old body may have used the whole limit
    try:
        return ws.open_pr(taker, branch, old.title, body)
    except Conflict:
        # The taker's branch has an open PR already: that one carries the work on.
        for pr in ws.list_prs(state="open", author=taker.name, limit=500):
            if pr.branch == branch:
                return pr
        raise


def _close_for(ws: LocalWorkspace, old: PullRequest, by: Worker) -> bool:
    """Close `old` as `by`, unless someone closed, merged or is merging it meanwhile."""
    if ws.queue.in_flight(old.number):
        return False
    with ws.db.write() as conn:
        done = conn.execute(
            update(pull_requests)
            .where(pull_requests.c.number == old.number, pull_requests.c.state == "open")
            .values(state="closed", closed_at=ws.clock(), closed_by=by.name)
        ).rowcount
    return bool(done)


def _reopen(ws: LocalWorkspace, old: PullRequest) -> None:
    with ws.db.write() as conn:
        conn.execute(
            update(pull_requests)
            .where(pull_requests.c.number == old.number, pull_requests.c.state == "closed")
            .values(state="open", closed_at=None, closed_by=None)
        )


def _link(ws: LocalWorkspace, old: PullRequest, new: PullRequest, by: Worker) -> None:
    ws.record_event(old.number, by.name, "closed", f"taken over by {by.name} as #{new.number}")
    ws.record_event(new.number, by.name, "took_over", f"#{old.number} by {old.author}")
