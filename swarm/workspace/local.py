"""The embedded workspace: a bare repository on disk, pull requests in the hub's database.

`main` moves only through the merge queue (see `swarm.workspace.merge`); a PR row is marked merged
only after main moved, and start-up reconciles a PR whose merge commit main already contains, so
a hub killed mid-merge leaves main and every PR consistent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast, get_args

import pygit2
from sqlalchemy import Row, func, insert, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from swarm.config import Settings
from swarm.context.schema import workers
from swarm.db import Database
from swarm.errors import (
    CheckFailed,
    Conflict,
    Forbidden,
    InvalidInput,
    MergeConflict,
    NotFound,
    Unavailable,
)
from swarm.registry import Worker
from swarm.workspace import abandon
from swarm.workspace.diffs import changed_files, inspect
from swarm.workspace.merge import MergeQueue, MergeRequest, NothingToMerge
from swarm.workspace.ports import (
    MAIN,
    OPERATOR,
    PRState,
    PullRequest,
    PullRequestDetail,
    Review,
    Verdict,
    branch_owner,
)
from swarm.workspace.repo import init_repo
from swarm.workspace.schema import pr_events, pull_requests, reviews

TITLE_LIMIT = 200
BODY_LIMIT = 20_000
RECONCILE_DEPTH = 100_000  # first-parent commits of main searched for a lost merge


class LocalWorkspace:
    """A bare repository at `path` (e.g. <run_dir>/workspace.git) served through the hub."""

    def __init__(
        self,
        path: Path,
        db: Database,
        *,
        hub_url: str | None = None,
        required_approvals: int = 0,
        merge_check: str | None = None,
        check_timeout: float = 600.0,
        check_sandbox: str | None = None,
        batch: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.db = db
        self.hub_url = hub_url.rstrip("/") if hub_url else None
        self.required_approvals = required_approvals
        self.clock = clock
        if not (path / "HEAD").exists():
            raise Unavailable(f"no workspace repository at {path}; create it with create()")
        self._local = threading.local()
        self.queue = MergeQueue(
            path, check=merge_check, check_timeout=check_timeout, batch=batch, sandbox=check_sandbox
        )
        self._reconciled: str | None = None  # main's head at the last full reconciliation
        self._abandon_seen = abandon.Seen()
        self.reconcile()

    @classmethod
    def create(
        cls, path: Path, seed_dir: Path | None, db: Database, **options: Any
    ) -> LocalWorkspace:
        """Create the repository (main = the seed files) unless it exists, then open it."""
        init_repo(path, seed_dir)
        return cls(path, db, **options)

    @property
    def git_dir(self) -> Path:
        return self.path

    def shutdown(self) -> None:
        """Stop the merge queue (waiting merges finish first)."""
        self.queue.close()

    close_queue = shutdown  # the name the contract harness uses

    def _repo(self) -> pygit2.Repository:
        # libgit2 objects are not shared between threads: one Repository per thread.
        repo: pygit2.Repository | None = getattr(self._local, "repo", None)
        if repo is None:
            repo = self._local.repo = pygit2.Repository(str(self.path))
        return repo

    def _branch_head(self, branch: str) -> pygit2.Oid | None:
        ref = self._repo().references.get(f"refs/heads/{branch}")
        return None if ref is None else pygit2.Oid(hex=str(ref.resolve().target))

    def clone_url(self, worker: Worker) -> str:
        """The hub's git URL; the token travels as `http.extraHeader` or the basic-auth password."""
        if self.hub_url is None:
            return str(self.path)
        return f"{self.hub_url}/git/{self.path.name}"

    def main_head(self) -> str:
        head = self._branch_head(MAIN)
        if head is None:
            raise Unavailable("the workspace has no main branch; recreate the run")
        return str(head)

    # -- pull requests -------------------------------------------------------------------------

    def open_pr(self, author: Worker, branch: str, title: str, body: str) -> PullRequest:
        title, body = (title or "").strip(), (body or "").strip()
        branch = (branch or "").strip().removeprefix("refs/heads/")
        if not title:
            raise InvalidInput("the title is empty; say in a few words what the PR does")
        if len(title) > TITLE_LIMIT or len(body) > BODY_LIMIT:
            raise InvalidInput(f"title or description too long (limits {TITLE_LIMIT}/{BODY_LIMIT})")
        if not branch or branch == MAIN:
            raise InvalidInput(f"open a PR from your own branch ({author.name}/<topic>), not main")
        if not pygit2.reference_is_valid_name(f"refs/heads/{branch}"):
            raise InvalidInput(
                f"{branch!r} is not a valid branch name (git check-ref-format); "
                f"use {author.name}/<topic> with letters, digits, '-', '_', '.' and '/'"
            )
        if branch_owner(branch) != author.name:
            raise Forbidden(
                f"{branch} is not your branch: you open PRs only from yours "
                f"({author.name}/<topic>); ask {branch_owner(branch)} to open it, or push the "
                f"commits to a branch of yours first"
            )
        head = self._branch_head(branch)
        if head is None:
            raise NotFound(
                f"branch {branch} was never pushed; push it first "
                f"(git push origin HEAD:{branch}), then open the PR"
            )
        main = self._branch_head(MAIN)
        if main is not None and (head == main or self._repo().descendant_of(main, head)):
            raise Conflict(f"branch {branch} has nothing that main does not already contain")
        now = self.clock()
        try:
            with self.db.write() as conn:
                number = conn.execute(
                    insert(pull_requests)
                    .values(title=title, body=body, author_id=author.id, author=author.name,
                            branch=branch, state="open", created_at=now, head=str(head))
                    .returning(pull_requests.c.number)
                ).scalar_one()  # fmt: skip
                self._event(conn, number, author.name, "opened", f"{branch} at {head}")
        except IntegrityError as exc:
            same = self._open_pr_for(branch)
            if same is not None and same.author == author.name and same.title == title:
                # The same author opening the same PR again (a retry whose first answer was
                # lost after the PR was recorded): the answer is that PR, as the first one's.
                return same
            raise Conflict(
                f"an open PR already exists for branch {branch}; push to it (it updates) or "
                "close it first (sw pr list --author you)"
            ) from exc
        return self._pr_by_number(number)

    def _open_pr_for(self, branch: str) -> PullRequest | None:
        with self.db.read() as conn:
            number = conn.execute(
                select(pull_requests.c.number).where(
                    pull_requests.c.branch == branch, pull_requests.c.state == "open"
                )
            ).scalar()
        return None if number is None else self._pr_by_number(int(number))

    def list_prs(
        self, *, state: PRState | None = None, author: str | None = None, limit: int = 50
    ) -> list[PullRequest]:
        if state is not None and state not in get_args(PRState):
            raise InvalidInput(f"unknown state {state!r}; use one of open, merged, closed")
        if not 1 <= limit <= 500:
            raise InvalidInput("limit must be between 1 and 500")
        query = select(pull_requests).order_by(pull_requests.c.number.desc()).limit(limit)
        if state is not None:
            query = query.where(pull_requests.c.state == state)
        with self.db.read() as conn:
            if author is not None:
                known = conn.execute(select(workers.c.id).where(workers.c.name == author)).first()
                if known is None:
                    raise NotFound(f"no worker named {author!r}; `sw workers` lists them")
                query = query.where(pull_requests.c.author == author)
            rows = conn.execute(query).all()
            verdicts = self._verdicts(conn, [r.number for r in rows])
            given_up = self._abandoned_among(conn, [r.number for r in rows if r.state == "open"])
        return [self._pr(r, verdicts.get(r.number, {}), r.number in given_up) for r in rows]

    def get_pr(self, number: int) -> PullRequestDetail:
        with self.db.read() as conn:
            row = self._row(conn, number)
            review_rows = conn.execute(
                select(reviews).where(reviews.c.number == number).order_by(reviews.c.id)
            ).all()
            event_rows = conn.execute(
                select(pr_events).where(pr_events.c.number == number).order_by(pr_events.c.id)
            ).all()
            verdicts = self._verdicts(conn, [number]).get(number, {})
            given_up = row.state == "open" and bool(self._abandoned_among(conn, [number]))
        pr = self._pr(row, verdicts, given_up)
        diff, files, mergeable, conflicts = inspect(self._repo(), pr)
        return PullRequestDetail(
            pr=pr,
            diff=diff,
            files=files,
            reviews=tuple(_review(r) for r in review_rows),
            mergeable=mergeable,
            conflicts=conflicts,
            events=tuple(_event_line(e) for e in event_rows),
        )

    def review(self, reviewer: Worker, number: int, verdict: Verdict, body: str) -> Review:
        if verdict not in get_args(Verdict):
            raise InvalidInput(
                f"unknown verdict {verdict!r}; use approve, request_changes, comment"
            )
        body = (body or "").strip()
        if verdict != "approve" and not body:
            raise InvalidInput(f"a {verdict} review needs a body saying what to change or why")
        if len(body) > BODY_LIMIT:
            raise InvalidInput(f"the review is {len(body)} characters; the limit is {BODY_LIMIT}")
        pr = self._pr_by_number(number)
        if pr.state != "open":
            raise Conflict(f"PR #{number} is {pr.state}; only open PRs can be reviewed")
        if verdict == "approve" and reviewer.name in (pr.author, branch_owner(pr.branch)):
            raise Forbidden(f"you cannot approve your own PR #{number}; ask a peer to review it")
        now = self.clock()
        with self.db.write() as conn:
            review_id = conn.execute(
                insert(reviews)
                .values(number=number, author_id=reviewer.id, author=reviewer.name,
                        verdict=verdict, body=body, head=pr.head, created_at=now)
                .returning(reviews.c.id)
            ).scalar_one()  # fmt: skip
            self._event(conn, number, reviewer.name, "reviewed", verdict)
        return Review(review_id, number, reviewer.name, verdict, body, now)

    def merge(self, worker: Worker, number: int) -> PullRequest:
        """Any worker may merge (integrators emerge); the operator's merge overrides reviews."""
        with self.db.read() as conn:
            row = self._row(conn, number)
            verdicts = self._verdicts(conn, [number]).get(number, {})
        pr = self._pr(row, verdicts)
        if pr.state == "merged":
            raise Conflict(f"PR #{number} was already merged by {pr.merged_by} ({pr.merge_commit})")
        if pr.state == "closed":
            raise Conflict(f"PR #{number} is closed; open a new PR to merge its branch")
        if pr.approvals < self.required_approvals and worker != OPERATOR:
            missing = self.required_approvals - pr.approvals
            raise Conflict(
                f"PR #{number} has {pr.approvals} of the {self.required_approvals} approvals "
                f"this run requires; {missing} more needed (ask peers: sw pr review {number})"
            )
        blocking = sorted(a for a, (v, _head) in verdicts.items() if v == "request_changes")
        if blocking and worker != OPERATOR:
            raise Conflict(
                f"PR #{number}: {', '.join(blocking)} requested changes; push the fix and ask "
                f"them to approve (sw pr review {number} approve), or ask the operator"
            )
        reviewed = pr.head if self.required_approvals and worker != OPERATOR else None
        request = MergeRequest(
            number, pr.branch, pr.title, pr.author, worker.name, expected_head=reviewed
        )
        try:
            merged = self.queue.merge(request)
        except MergeConflict as exc:
            self._record(number, worker.name, "conflict", ", ".join(exc.files))
            raise
        except CheckFailed as exc:
            self._record(number, worker.name, "check_failed", exc.output[-500:])
            raise
        except NothingToMerge:
            # Main may hold this PR's merge already (its recording failed, or a retry of the
            # same call): the answer is then the merged PR, as the first attempt's would be.
            self.reconcile()
            if self._pr_by_number(number).state == "merged":
                return self._pr_by_number(number)
            raise
        # Main moved: record it, riding out a database blip (reconciliation would record it
        # within seconds anyway, but the caller deserves the answer now).
        for attempt in Retrying(
            retry=retry_if_exception_type(OperationalError),
            stop=stop_after_attempt(5),
            wait=wait_exponential(multiplier=0.2, max=2),
            reraise=True,
        ):
            with attempt:
                self._mark_merged(number, worker.name, merged.commit, merged.head, self.clock())
        return self._pr_by_number(number)

    def close(self, worker: Worker, number: int) -> PullRequest:
        pr = self._pr_by_number(number)
        if pr.state != "open":
            raise Conflict(f"PR #{number} is already {pr.state}")
        if worker != OPERATOR and worker.name != pr.author and not self._abandoned(number):
            raise Forbidden(
                f"PR #{number} is {pr.author}'s; only its author (or the operator) closes it. "
                f"Tell them why: sw pr review {number} request-changes -m '...'"
            )
        if self.queue.in_flight(number):
            raise Conflict(f"PR #{number} is being merged right now; look again in a moment")
        with self.db.write() as conn:
            conn.execute(
                update(pull_requests)
                .where(pull_requests.c.number == number, pull_requests.c.state == "open")
                .values(state="closed", closed_at=self.clock(), closed_by=worker.name)
            )
            self._event(conn, number, worker.name, "closed", "")
        return self._pr_by_number(number)

    def counts(self) -> dict[str, int]:
        """Pull requests by state, and how many merge attempts met a conflict."""
        with self.db.read() as conn:
            by_state: dict[str, int] = dict(
                conn.execute(
                    select(pull_requests.c.state, func.count()).group_by(pull_requests.c.state)
                ).all()
            )
            conflicts = conn.execute(
                select(func.count()).select_from(pr_events).where(pr_events.c.kind == "conflict")
            ).scalar_one()
        result = {state: int(by_state.get(state, 0)) for state in ("open", "merged", "closed")}
        result["conflicts"] = int(conflicts)
        return result

    def reconcile(self) -> int:
        """Mark merged every unmerged PR whose merge commit main contains; returns how many.
        The hub runs it every few seconds (swarm.hub.liveness); each turn reads main only
        down to the head the last turn reconciled (read before the PRs, so a PR merged in
        between is still pending when its merge commit is read)."""
        tip = self.main_head()
        with self.db.read() as conn:
            pending = {
                r.number: r.branch
                for r in conn.execute(
                    select(pull_requests.c.number, pull_requests.c.branch).where(
                        pull_requests.c.state != "merged"
                    )
                )
            }
        if not pending:
            self._reconciled = tip
            return 0
        found = 0
        repo = self._repo()
        walker = repo.walk(pygit2.Oid(hex=tip), pygit2.enums.SortMode.TOPOLOGICAL)
        walker.simplify_first_parent()
        stop_at = self._reconciled
        for depth, commit in enumerate(walker):
            if depth >= RECONCILE_DEPTH or not pending or str(commit.id) == stop_at:
                break
            trailers = _trailers(commit.message)
            number = int(trailers.get("Swarm-PR", "0") or 0)
            if pending.get(number) == trailers.get("Swarm-Branch") and len(commit.parents) == 2:
                merged_by = trailers.get("Swarm-Merged-By", "swarm")
                head = str(commit.parent_ids[1])
                self._mark_merged(number, merged_by, str(commit.id), head, commit.commit_time)
                del pending[number]
                found += 1
        self._reconciled = tip
        return found

    def sweep_abandoned(self) -> tuple[list[int], list[int]]:
        """PRs given up marked abandoned, abandoned ones main holds closed (the hub's upkeep
        runs it every few seconds; see swarm.workspace.abandon)."""
        return abandon.sweep(self, self._abandon_seen, self.clock())

    def close_by_hub(self, number: int, reason: str) -> bool:
        if self.queue.in_flight(number):
            return False
        with self.db.write() as conn:
            done = conn.execute(
                update(pull_requests)
                .where(pull_requests.c.number == number, pull_requests.c.state == "open")
                .values(state="closed", closed_at=self.clock(), closed_by="hub")
            ).rowcount
            if done:
                self._event(conn, number, "hub", "closed", reason)
        return bool(done)

    # -- helpers -------------------------------------------------------------------------------

    def _mark_merged(self, number: int, by: str, commit: str, head: str, when: float) -> None:
        # Main already moved: the merge is a fact, so it overrides a close that raced it.
        with self.db.write() as conn:
            done = conn.execute(
                update(pull_requests)
                .where(pull_requests.c.number == number, pull_requests.c.state != "merged")
                .values(state="merged", merged_at=when, merged_by=by, merge_commit=commit,
                        head=head)
            ).rowcount  # fmt: skip
            if done:
                self._event(conn, number, by, "merged", commit)

    def _abandoned(self, number: int) -> bool:
        """Given up by its author (swarm.workspace.abandon): whoever takes the work over may
        close it."""
        with self.db.read() as conn:
            return bool(self._abandoned_among(conn, [number]))

    @staticmethod
    def _abandoned_among(conn: Any, numbers: list[int]) -> set[int]:
        if not numbers:
            return set()
        return set(
            conn.execute(
                select(pr_events.c.number)
                .where(pr_events.c.number.in_(numbers), pr_events.c.kind == "abandoned")
                .distinct()
            ).scalars()
        )

    def _record(self, number: int, actor: str, kind: str, detail: str) -> None:
        with self.db.write() as conn:
            self._event(conn, number, actor, kind, detail)

    record_event = _record  # for the take-over and abandonment modules

    def changed_files(self, pr: PullRequest) -> tuple[str, ...]:
        return changed_files(self._repo(), pr.head)

    def repository(self) -> pygit2.Repository:
        """This thread's handle on the bare repository."""
        return self._repo()

    def _event(self, conn: Any, number: int, actor: str, kind: str, detail: str) -> None:
        conn.execute(
            insert(pr_events).values(
                number=number, created_at=self.clock(), actor=actor, kind=kind, detail=detail
            )
        )

    def _row(self, conn: Any, number: int) -> Row[Any]:
        row: Row[Any] | None = conn.execute(
            select(pull_requests).where(pull_requests.c.number == number)
        ).first()
        if row is None:
            raise NotFound(f"no PR #{number}; `sw pr list` shows the open ones")
        return row

    def _pr_by_number(self, number: int) -> PullRequest:
        with self.db.read() as conn:
            row = self._row(conn, number)
            verdicts = self._verdicts(conn, [number]).get(number, {})
            given_up = row.state == "open" and bool(self._abandoned_among(conn, [number]))
        return self._pr(row, verdicts, given_up)

    def pr(self, number: int) -> PullRequest:
        """One PR without its diff (cheaper than get_pr)."""
        return self._pr_by_number(number)

    def _verdicts(self, conn: Any, numbers: list[int]) -> dict[int, dict[str, tuple[str, str]]]:
        """Per PR, each reviewer's latest verdict (comments aside) and the head it reviewed."""
        if not numbers:
            return {}
        rows = conn.execute(
            select(reviews.c.number, reviews.c.author, reviews.c.verdict, reviews.c.head)
            .where(reviews.c.number.in_(numbers), reviews.c.verdict != "comment")
            .order_by(reviews.c.id)
        ).all()
        latest: dict[int, dict[str, tuple[str, str]]] = {}
        for r in rows:
            latest.setdefault(r.number, {})[r.author] = (r.verdict, r.head)
        return latest

    def _pr(
        self, row: Row[Any], verdicts: dict[str, tuple[str, str]], abandoned: bool = False
    ) -> PullRequest:
        head = row.head
        if row.state == "open":
            live = self._branch_head(row.branch)
            head = str(live) if live is not None else head
        # As Gitea's "dismiss stale approvals": an approval is for the head it reviewed.
        own = {row.author, branch_owner(row.branch)}
        approvals = sum(
            1
            for author, (verdict, reviewed) in verdicts.items()
            if verdict == "approve" and reviewed == head and author not in own
        )
        return PullRequest(
            number=row.number, title=row.title, body=row.body, author=row.author,
            branch=row.branch, state=cast(PRState, row.state), created_at=row.created_at,
            head=head, approvals=approvals, merged_at=row.merged_at, merged_by=row.merged_by,
            merge_commit=row.merge_commit, closed_at=row.closed_at, abandoned=abandoned,
        )  # fmt: skip


def _trailers(message: str) -> dict[str, str]:
    trailers = {}
    for line in message.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.startswith("Swarm-"):
            trailers[key] = value.strip()
    return trailers


def _review(row: Row[Any]) -> Review:
    verdict = cast(Verdict, row.verdict)
    return Review(row.id, row.number, row.author, verdict, row.body, row.created_at)


def _event_line(row: Row[Any]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(row.created_at))
    return f"{when} {row.actor} {row.kind}" + (f": {row.detail}" if row.detail else "")


def from_settings(settings: Settings, db: Database, clock: Callable[[], float]) -> LocalWorkspace:
    """The run's workspace at <run_dir>/workspace.git (created empty unless a task seeded it)."""
    return LocalWorkspace.create(
        settings.run_dir / "workspace.git",
        None,
        db,
        hub_url=settings.public_url or f"http://{settings.host}:{settings.port}",
        required_approvals=settings.required_approvals,
        merge_check=settings.merge_check,
        check_sandbox=settings.sandbox,
        clock=clock,
    )
