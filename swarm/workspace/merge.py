"""The merge engine: one queue per repository merges pull requests in memory, moving main by CAS.

Every merge request goes to a single thread. It takes all requests waiting, merges them one after
another onto the current `main` with pygit2 (no working tree, no process start-up), and moves
`main` once per batch by compare-and-swap. A request that conflicts or fails the check is refused
on its own; the others of the batch still land. Callers block on a future for their own result.
"""

from __future__ import annotations

import logging
import os
import queue
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path

import pygit2

from swarm.diskfull import is_disk_full
from swarm.errors import (
    CheckFailed,
    Conflict,
    MergeConflict,
    NotFound,
    StorageFull,
    SwarmError,
    Unavailable,
)
from swarm.sandbox import BoxSpec, Sandbox, SandboxLimits, default_sandbox, get_sandbox, run
from swarm.sandbox.env import base_env
from swarm.workspace.ancestry import Ancestry

log = logging.getLogger("swarm.workspace.merge")

MAIN_REF = "refs/heads/main"
COMMITTER = ("swarm", "swarm@localhost")
CHECK_OUTPUT_TAIL = 4000
CAS_ATTEMPTS = 20


class NothingToMerge(Conflict):
    """The branch has nothing that main does not already contain."""

    def __init__(self, message: str, head: str) -> None:
        super().__init__(message)
        self.head = head


class DuplicateMerge(NothingToMerge):
    """The branch has commits, but merging them would change nothing on main: the same change
    is already there (e.g. a peer did the same unit)."""


class AlreadyMerged(NothingToMerge):
    """This queue already merged the PR (main carries its merge commit): never twice."""


@dataclass(frozen=True)
class MergeRequest:
    number: int  # the PR; two requests for the same PR in flight share one result
    branch: str  # short name, e.g. "w3/parser"
    title: str
    author: str
    merged_by: str
    # The head the reviews approved: a push after them must not merge unreviewed (None: any).
    expected_head: str | None = None


@dataclass(frozen=True)
class Merged:
    commit: str  # the merge commit now on main
    head: str  # the branch commit that was merged


@dataclass
class MergeStats:
    batches: int = 0
    merged: int = 0
    refused: int = 0
    cas_retries: int = 0
    largest_batch: int = 0


@dataclass
class _Item:
    request: MergeRequest
    future: Future[Merged] = field(default_factory=Future)


def merge_message(request: MergeRequest) -> str:
    """The merge commit's message; the trailers let start-up reconciliation find the PR."""
    return (
        f"Merge PR #{request.number}: {request.title}\n\n"
        f"Branch {request.branch} by {request.author}, merged by {request.merged_by}.\n\n"
        f"Swarm-PR: {request.number}\n"
        f"Swarm-Branch: {request.branch}\n"
        f"Swarm-Author: {request.author}\n"
        f"Swarm-Merged-By: {request.merged_by}\n"
    )


def conflict_files(repo: pygit2.Repository, ours: pygit2.Oid, theirs: pygit2.Oid) -> list[str]:
    """The paths that conflict when merging `theirs` into `ours` (empty: merges cleanly)."""
    index = repo.merge_commits(ours, theirs)
    if index.conflicts is None:
        return []
    return sorted({entry.path for triple in index.conflicts for entry in triple if entry})


def write_tree(repo: pygit2.Repository, tree: pygit2.Tree, dest: Path) -> None:
    """Write a tree's files under `dest` (the checkout a merge check runs in)."""
    for entry in tree:
        name = entry.name or ""
        if name in ("", ".", "..", ".git") or "/" in name:
            continue  # never let a crafted tree write outside the checkout
        target = dest / name
        if entry.filemode == pygit2.GIT_FILEMODE_TREE:
            target.mkdir()
            write_tree(repo, repo[entry.id].peel(pygit2.Tree), target)
        elif entry.filemode == pygit2.GIT_FILEMODE_LINK:
            os.symlink(repo[entry.id].peel(pygit2.Blob).data.decode(), target)
        elif entry.filemode == pygit2.GIT_FILEMODE_COMMIT:
            target.mkdir()  # a submodule: an empty directory, as in a fresh clone
        else:
            target.write_bytes(repo[entry.id].peel(pygit2.Blob).data)
            if entry.filemode == pygit2.GIT_FILEMODE_BLOB_EXECUTABLE:
                target.chmod(0o755)


def run_check(
    repo: pygit2.Repository,
    tree: pygit2.Oid,
    command: str,
    timeout: float,
    number: int,
    sandbox: Sandbox | None = None,
) -> None:
    """Run the merge check in a temporary checkout of `tree`; raise CheckFailed when it fails.

    The check runs the PR's code, and its output goes back to the worker: so it runs in a box
    of its own (`sandbox`, default: this machine's default backend) with no network and an
    allow-listed environment, never the hub's (which holds the operator token)."""
    sandbox = sandbox or get_sandbox(default_sandbox())
    env = base_env()
    env["SWARM_MERGE_PR"] = str(number)
    with tempfile.TemporaryDirectory(prefix="swarm-check-") as tmp:
        write_tree(repo, repo[tree].peel(pygit2.Tree), Path(tmp))
        spec = BoxSpec(
            name=f"check-{number}",
            checkout=Path(tmp),
            env=env,
            network=False,
            limits=replace(SandboxLimits.from_env(), command_seconds=timeout),
        )
        box = sandbox.open(spec)
        try:
            done = run(box, ["/bin/sh", "-c", command], timeout=timeout, merge_stderr=True)
        except subprocess.TimeoutExpired as exc:
            output = str(exc.output or "")[-CHECK_OUTPUT_TAIL:]
            raise CheckFailed(
                f"the merge check `{command}` timed out after {timeout:.0f}s on the merged tree "
                f"of PR #{number}; main did not move. Make it pass locally, push, merge again.",
                output,
            ) from exc
        except OSError as exc:
            raise Unavailable(
                f"the merge check's sandbox ({sandbox.name}) could not start: {exc}; the hub's "
                "operator must fix it (SWARM_SANDBOX, docs/security.md)"
            ) from exc
        finally:
            box.close()
    if done.returncode != 0:
        output = done.stdout[-CHECK_OUTPUT_TAIL:]
        raise CheckFailed(
            f"the merge check `{command}` failed (exit {done.returncode}) on the merged tree of "
            f"PR #{number}; main did not move. Merge main into your branch, fix it so the check "
            f"passes, push, merge again. Output (tail):\n{output}",
            output,
        )


class MergeQueue:
    """A single merge thread per repository; `merge()` blocks until its own PR landed or failed."""

    def __init__(
        self,
        git_dir: Path,
        *,
        check: str | None = None,
        check_timeout: float = 600.0,
        batch: bool = True,
        max_batch: int = 256,
        sandbox: str | None = None,
    ) -> None:
        self.git_dir = git_dir
        self.check = check
        self.check_timeout = check_timeout
        self.sandbox_name = sandbox or default_sandbox()  # where the merge check runs
        self._sandbox: Sandbox | None = None
        self.max_batch = max_batch if batch else 1
        self.stats = MergeStats()
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._inflight: dict[int, _Item] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._ancestry = Ancestry()  # used by the merge thread only
        # PRs this queue merged: a PR whose merge was not recorded (the database failed after
        # main moved) and whose branch moved on since must not be merged a second time.
        self._merged: set[int] = set()

    def submit(self, request: MergeRequest) -> Future[Merged]:
        with self._lock:
            if self._closed:
                raise Unavailable("the merge queue is shut down; restart the hub")
            item = self._inflight.get(request.number)
            if item is None:
                item = self._inflight[request.number] = _Item(request)
                self._queue.put(item)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"merge-queue:{self.git_dir.name}", daemon=True
                )
                self._thread.start()
        return item.future

    def merge(self, request: MergeRequest) -> Merged:
        return self.submit(request).result()

    def in_flight(self, number: int) -> bool:
        with self._lock:
            return number in self._inflight

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def _run(self) -> None:
        # Every object the merge writes comes from objects libgit2 just read; re-checking that
        # each tree entry exists costs more than the merge itself (it is a process-wide option).
        pygit2.settings.enable_strict_object_creation(False)
        repo = pygit2.Repository(str(self.git_dir))
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # finish this batch, then stop
                    break
                batch.append(item)
            try:
                self._process(repo, batch)
            except Exception as exc:  # never leave a caller waiting forever
                # Main did not move: the batch's commits must not count as reachable from it.
                self._ancestry.reset()
                error = _translate(exc, self.git_dir)
                numbers = ", ".join(f"#{item.request.number}" for item in batch)
                # Logged (to stderr and the hub's database: swarm.hub.hublog), so why a merge
                # failed survives a full disk; a refusal for space is logged once by the hub.
                if not isinstance(error, StorageFull):
                    log.error("merging %s failed: %s: %s", numbers, type(exc).__name__, exc)
                self._finish([(item, error) for item in batch])

    def _process(self, repo: pygit2.Repository, batch: list[_Item]) -> None:
        for _attempt in range(CAS_ATTEMPTS):
            ref = repo.references.get(MAIN_REF)
            if ref is None:
                raise Unavailable("the workspace has no main branch; recreate the run")
            base = pygit2.Oid(hex=str(ref.target))
            self._ancestry.follow(repo, base)
            tip = base
            outcomes: list[tuple[_Item, Merged | BaseException]] = []
            for item in batch:
                try:
                    merged = self._merge_one(repo, tip, item.request)
                except SwarmError as exc:
                    outcomes.append((item, exc))
                    continue
                tip = pygit2.Oid(hex=merged.commit)
                outcomes.append((item, merged))
            if tip != base:
                try:
                    ref.set_target(tip, f"swarm: merge {len(batch)} pull request(s)")
                except (pygit2.GitError, ValueError, OSError) as exc:
                    if is_disk_full(exc, self.git_dir):
                        # Not a lost race: main's lock file could not be written, so main did
                        # not move (and no reflog says it did: the repository keeps none).
                        raise _translate(exc, self.git_dir) from exc
                    # main moved under us (CAS lost, or its lock was taken): redo on the new main
                    self.stats.cas_retries += 1
                    self._ancestry.reset()
                    time.sleep(0.001)
                    continue
            self.stats.batches += 1
            self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
            self._finish(outcomes)
            return
        raise Unavailable("main kept moving under the merge queue; retry the merge")

    def _finish(self, outcomes: list[tuple[_Item, Merged | BaseException]]) -> None:
        with self._lock:
            for item, _ in outcomes:
                self._inflight.pop(item.request.number, None)
        for item, outcome in outcomes:
            if isinstance(outcome, Merged):
                self._merged.add(item.request.number)
                self.stats.merged += 1
                item.future.set_result(outcome)
            else:
                self.stats.refused += 1
                item.future.set_exception(outcome)

    def _merge_one(self, repo: pygit2.Repository, tip: pygit2.Oid, req: MergeRequest) -> Merged:
        if req.number in self._merged:
            raise AlreadyMerged(f"PR #{req.number} is already merged into main", "")
        ref = repo.references.get(f"refs/heads/{req.branch}")
        if ref is None:
            raise NotFound(
                f"branch {req.branch} of PR #{req.number} is gone; push it again "
                f"(git push origin HEAD:{req.branch}) or close the PR"
            )
        head = pygit2.Oid(hex=str(ref.resolve().target))
        if req.expected_head is not None and str(head) != req.expected_head:
            raise Conflict(
                f"branch {req.branch} of PR #{req.number} moved while it waited to merge; its "
                "approvals were for the earlier head. Look at it again (sw pr show)"
            )
        base, new = self._ancestry.base(repo, head)
        if base == head:
            raise NothingToMerge(
                f"branch {req.branch} of PR #{req.number} has nothing that main does not "
                "already contain; push your commits to it or close the PR",
                str(head),
            )
        if base is not None:
            ancestor, ours, theirs = (repo[o].peel(pygit2.Commit).tree for o in (base, tip, head))
            index = repo.merge_trees(ancestor, ours, theirs)
        else:  # several merge bases (criss-cross) or none: libgit2's recursive merge
            index = repo.merge_commits(tip, head)
        if index.conflicts is not None:
            files = sorted({e.path for triple in index.conflicts for e in triple if e})
            raise MergeConflict(
                f"PR #{req.number} conflicts with main in: {', '.join(files)}. Merge main into "
                f"your branch (git fetch origin && git merge origin/main), resolve those files, "
                f"commit, push ({req.branch}), then merge again.",
                files,
            )
        tree = index.write_tree(repo)
        if tree == repo[tip].peel(pygit2.Commit).tree_id:
            raise DuplicateMerge(
                f"PR #{req.number} is a duplicate: merging {req.branch} would change nothing on "
                "main, whose files already hold its changes (a peer did the same work?). It was "
                f"not merged; close it (sw pr close {req.number}) and pick other work.",
                str(head),
            )
        if self.check:
            if self._sandbox is None:  # a missing backend refuses the merge, saying why
                self._sandbox = get_sandbox(self.sandbox_name)
            run_check(repo, tree, self.check, self.check_timeout, req.number, self._sandbox)
        author = pygit2.Signature(req.merged_by, f"{req.merged_by}@swarm.localhost")
        committer = pygit2.Signature(*COMMITTER)
        commit = repo.create_commit(None, author, committer, merge_message(req), tree, [tip, head])
        # Objects before refs, and checked: on a full disk libgit2 (1.9) answers a commit id for
        # a commit it did not write, and main moved onto it would point at nothing.
        for oid, what in ((tree, "tree"), (commit, "commit")):
            if not repo.odb.exists(oid):
                raise StorageFull(
                    f"git could not write the merge {what} of PR #{req.number} (the workspace's "
                    "disk is full?); main did not move. Merge again once space is freed "
                    "(sw and the workers retry by themselves)."
                )
        self._ancestry.add(commit, new)
        return Merged(str(commit), str(head))


def _translate(exc: Exception, git_dir: Path) -> Exception:
    """The project's error for a git write that failed for lack of space (a 507, retried)."""
    if isinstance(exc, SwarmError) or not is_disk_full(exc, git_dir):
        return exc
    return StorageFull(
        f"the workspace's disk is full: git could not write ({exc}); main did not move. "
        "Merge again once space is freed (sw and the workers retry by themselves)."
    )
