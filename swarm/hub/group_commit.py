"""Group commit of appends: the entries that concurrent calls record are written together.

Every call to POST /v1/entries pays for a transaction: the caller's delivery block is read and
its cursor moved, the entry is inserted, and the commit makes both visible at once. With
hundreds of workers appending at once, those transactions queue up behind one writer (SQLite) or
one id lock (PostgreSQL), and each costs a dozen round trips of driver and SQLAlchemy work. Here
the calls that arrive while a batch is being written wait together and are written as the next
batch, in one transaction, from one writer thread: one statement for all delivery states, one
page of newest entries shared by all the callers, one INSERT for all entries.

On SQLite, a call that arrives while appends are sparse (at most BUSY_CALLS in the last
BUSY_WINDOW, i.e. under ~200/s) and no batch is in flight is written at once on the event loop,
as the hub's other short calls are. Both halves were measured:

* Sparse appends in the writer thread waited for the event loop to come round twice (hand-off
  and answer), and in a real run the loop is busy with greps and git: during 64- and 256-worker
  runs their median was 46-262 ms where the short calls on the loop took 2-6 ms; written at once,
  5-8 ms.
* A flood written on the event loop in large batches (124 appends a transaction on average with
  256 clients in a closed loop) blocked it for milliseconds at a time, and the connections were
  served unfairly: one call in ten waited over 1.5 s before its handler ran while the rest were
  quick. From the writer thread, the closed-loop p99 is that of the no-op endpoint.

On PostgreSQL every statement waits on the network, so every batch goes to the writer thread.

A batch fails as a whole only on an unexpected database error; it is then written again one call
at a time, so one bad call never fails the others. A call whose refs name missing entries gets
its 404 and changes nothing: its worker's delivery is not taken.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from swarm.bootstrap import Runtime
from swarm.context.model import AppendResult, PendingEntry
from swarm.delivery import EMPTY, Delivery

log = logging.getLogger("swarm.hub.group_commit")

MAX_BATCH = 256
# SQLite: while at most BUSY_CALLS appends arrived in the last BUSY_WINDOW seconds (under
# ~200/s), each is written at once on the event loop; above that they are batched.
BUSY_WINDOW = 0.1
BUSY_CALLS = 20


@dataclass(frozen=True)
class Appended:
    result: AppendResult
    delivery: Delivery


Outcome = Appended | Exception


class GroupCommit:
    def __init__(
        self, runtime: Runtime, max_batch: int = MAX_BATCH, inline: bool | None = None
    ) -> None:
        self.runtime = runtime
        self.max_batch = max_batch
        self.inline = runtime.db.is_sqlite if inline is None else inline
        self._arrivals: deque[float] = deque()  # monotonic times of the recent appends
        self._waiting: list[tuple[PendingEntry, asyncio.Future[Appended]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="swarm-group-commit")
        self.batches = 0  # batches written, and the calls in them (for the hub's own figures)
        self.calls = 0

    async def append(self, pending: PendingEntry) -> Appended:
        """Write one checked entry with its author's delivery block; raises what the write
        raised for this call (NotFound for missing refs)."""
        if self.inline and not self._busy():
            outcome = self.write([pending])[0]  # no hop, no wait
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Appended] = loop.create_future()
        self._waiting.append((pending, done))
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_batches())
        return await done

    def _busy(self) -> bool:
        """Whether to batch this call: appends are arriving fast, or a batch is in flight."""
        now = time.monotonic()
        arrivals = self._arrivals
        arrivals.append(now)
        while arrivals[0] < now - BUSY_WINDOW:
            arrivals.popleft()
        writing = self._waiting or (self._writer is not None and not self._writer.done())
        return bool(writing) or len(arrivals) > BUSY_CALLS

    async def _write_batches(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiting:
            # One turn of the loop first: calls whose requests are already read join this batch.
            await asyncio.sleep(0)
            batch = self._waiting[: self.max_batch]
            del self._waiting[: self.max_batch]
            pending = [p for p, _ in batch]
            try:
                outcomes = await loop.run_in_executor(self._thread, self.write, pending)
            except Exception as exc:  # not expected: write() answers per call
                log.exception("group commit failed")
                outcomes = [exc] * len(batch)
            for (_, done), outcome in zip(batch, outcomes, strict=True):
                if done.done():  # the caller went away
                    continue
                if isinstance(outcome, Exception):
                    done.set_exception(outcome)
                else:
                    done.set_result(outcome)

    def write(self, pending: list[PendingEntry]) -> list[Outcome]:
        """Write a batch in one transaction; on an unexpected error, one call at a time."""
        self.batches += 1
        self.calls += len(pending)
        try:
            return self._write(pending)
        except Exception:
            if len(pending) == 1:
                raise
            log.warning("a batch of %d appends failed; writing them one at a time", len(pending))
            outcomes: list[Outcome] = []
            for one in pending:
                try:
                    outcomes += self._write([one])
                except Exception as exc:
                    outcomes.append(exc)
            return outcomes

    def _write(self, pending: list[PendingEntry]) -> list[Outcome]:
        context, deliverer = self.runtime.context, self.runtime.deliverer
        with self.runtime.db.write() as conn:
            problems = context.missing_refs(conn, pending)
            good = [p for p, problem in zip(pending, problems, strict=True) if problem is None]
            # Deliveries are read before the INSERT, so on PostgreSQL the id lock it takes is
            # held only until the commit; a worker with two calls in the batch gets its block
            # once, with the first of them.
            deliveries = deliverer.collect_many(conn, [p.author_id for p in good])
            written = iter(context.write_many(conn, good))
        outcomes: list[Outcome] = []
        for p, problem in zip(pending, problems, strict=True):
            if problem is not None:
                outcomes.append(problem)
            else:
                outcomes.append(Appended(next(written), deliveries.pop(p.author_id, EMPTY)))
        return outcomes

    def close(self) -> None:
        if self.calls:  # logged as the hub's latency summary is, at shutdown
            log.warning(
                "group commit: %d appends in %d transactions (%.1f a transaction)",
                self.calls,
                self.batches,
                self.calls / self.batches,
            )
        self._thread.shutdown(wait=True)
