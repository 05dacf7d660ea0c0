"""`Evaluator`: score `main` every `interval` seconds and once at the end, outside the swarm."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from swarm.errors import SwarmError
from swarm.evaluation.evaluate import Checkpoint, evaluate, sync_checkout
from swarm.tasks.model import Task

log = logging.getLogger(__name__)
Record = Callable[[Checkpoint], None]


class Evaluator:
    """Runs `evaluate` on a schedule in a thread and hands each checkpoint to `record`."""

    def __init__(
        self,
        task: Task,
        repo: str | Path,
        record: Record,
        *,
        workdir: str | Path,
        interval: float = 600.0,
        commit: str = "main",
    ) -> None:
        self.task = task.require_prepared()
        self.repo = repo
        self.record = record
        self.workdir = Path(workdir)
        self.interval = interval
        self.commit = commit
        self.last: Checkpoint | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one evaluation at a time: they share the checkout
        self._thread: threading.Thread | None = None

    def run_once(self) -> Checkpoint:
        """Score the commit now (reusing the last score if it has not moved) and record it."""
        with self._lock:
            now = time.time()
            try:
                if self.last is not None and self.last.reason is None:
                    _, sha = sync_checkout(self.repo, self.commit, self.workdir)
                    if sha == self.last.commit:
                        return self._record(self.last.restamped(now))
                checkpoint = evaluate(self.task, self.repo, self.commit, self.workdir)
            except SwarmError as exc:
                # The repository may not have `main` yet, or git may be briefly unavailable.
                checkpoint = Checkpoint(now, "", 0, 0, time.time() - now, "", exc.message)
            return self._record(checkpoint)

    def _record(self, checkpoint: Checkpoint) -> Checkpoint:
        self.last = checkpoint
        try:
            self.record(checkpoint)
        except Exception:  # a failing sink must not stop the schedule
            log.exception("recording checkpoint failed")
        return checkpoint

    def start(self) -> None:
        """Start the schedule: the first evaluation happens after one interval."""
        if self._thread is not None:
            raise RuntimeError("evaluator already started")
        self._thread = threading.Thread(target=self._loop, name="swarm-evaluator", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.run_once()

    def stop(self, *, final: bool = True) -> Checkpoint | None:
        """Stop the schedule and (by default) run the final evaluation; returns it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self.run_once() if final else None
