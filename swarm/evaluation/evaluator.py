"""`Evaluator`: score `main` whenever it moves, every `interval` seconds, and once at the end.

How it learns of a merge: it looks at main's ref in the shared repository (`git ls-remote`,
every `follow` seconds). That is the one thing both workspaces have in common (a bare repository
in the run directory, or Gitea over HTTP), it needs no route or token on the hub, and a look
that is missed or fails is simply repeated, so no merge can be lost the way a notification
could. Scorings are coalesced: one thread scores, so at most one scoring runs at a time, and
each fetches the newest main when it starts; merges that land meanwhile are scored together
by the next one."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from swarm.errors import SwarmError
from swarm.evaluation.evaluate import Checkpoint, score
from swarm.evaluation.source import FolderSource, Source, open_source
from swarm.tasks.environment import PythonEnv
from swarm.tasks.model import Task

log = logging.getLogger(__name__)
Record = Callable[[Checkpoint], None]
FOLLOW_SECONDS = 2.0


def remote_head(repo: str | Path, branch: str, timeout: float = 30.0) -> str | None:
    """The commit `branch` points at in `repo`, or None when it cannot be read right now."""
    try:
        result = subprocess.run(
            ["git", "ls-remote", "--heads", str(repo), f"refs/heads/{branch}"],
            capture_output=True, text=True, timeout=timeout,
            env=dict(os.environ, GIT_TERMINAL_PROMPT="0"),
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0 or not result.stdout.strip():
        return None
    return result.stdout.split()[0]


class Evaluator:
    """Scores `commit` in a thread (after each move, on a schedule) and hands each checkpoint
    to `record`."""

    def __init__(
        self,
        task: Task,
        repo: str | Path,
        record: Record,
        *,
        workdir: str | Path,
        interval: float = 600.0,
        commit: str = "main",
        follow: float | None = FOLLOW_SECONDS,
        sandbox: str | None = None,
        python_env: PythonEnv | None = None,
    ) -> None:
        self.task = task.require_prepared()
        self.workdir = Path(workdir).resolve()
        self.source: Source = open_source(repo, self.workdir)
        self.repo = self.source.location
        self.record = record
        self.sandbox = sandbox  # None: default_sandbox(); "none" only when asked by name
        self.python_env = python_env
        self.interval = interval
        self.commit = commit
        self.follow = follow  # seconds between looks at the branch; None: the interval only
        self.last: Checkpoint | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one evaluation at a time: they share the mirror
        self._thread: threading.Thread | None = None

    def run_once(self) -> Checkpoint:
        """Score the commit now (reusing the last score if it has not moved) and record it."""
        with self._lock:
            now = time.time()
            try:
                sha = self.source.resolve(self.commit)
                last = self.last
                if last is not None and last.status == "scored" and sha == last.commit:
                    return self._record(last.restamped(now))
                checkpoint = score(self.task, self.source, sha, self.workdir,
                                   sandbox=self.sandbox, python_env=self.python_env)  # fmt: skip
            except SwarmError as exc:
                # The repository may not have `main` yet, or git may be briefly unavailable.
                checkpoint = Checkpoint(
                    now, "", 0, 0, time.time() - now, "", exc.message, status="error"
                )
            return self._record(checkpoint)

    def moved(self) -> bool:
        """Whether the branch now points at a commit other than the last one scored."""
        if isinstance(self.source, FolderSource):
            try:
                head: str | None = self.source.resolve(self.commit)
            except (OSError, SwarmError):
                head = None
        else:
            head = remote_head(self.repo, self.commit)
        return head is not None and (self.last is None or head != self.last.commit)

    def _record(self, checkpoint: Checkpoint) -> Checkpoint:
        self.last = checkpoint
        try:
            self.record(checkpoint)
        except Exception:  # a failing sink must not stop the schedule
            log.exception("recording checkpoint failed")
        return checkpoint

    def start(self) -> None:
        """Start following the branch (its current state is scored at once when following) and
        the schedule (every `interval`)."""
        if self._thread is not None:
            raise RuntimeError("evaluator already started")
        self._thread = threading.Thread(target=self._loop, name="swarm-evaluator", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        due = time.monotonic() + self.interval
        while True:
            wait = due - time.monotonic()
            if self.follow is not None:
                wait = min(wait, self.follow)
            if self._stop.wait(max(0.0, wait)):
                return
            if time.monotonic() >= due:
                due = time.monotonic() + self.interval
                self.run_once()
            elif self.follow is not None and self.moved():
                self.run_once()

    def stop(self, *, final: bool = True) -> Checkpoint | None:
        """Stop following (a scoring under way finishes first) and, by default, score the end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self.run_once() if final else None
