"""The hub's background upkeep: dead workers are noticed in seconds, and the PR table follows main.

A worker whose runtime stopped sending heartbeats for SWARM_DEAD_AFTER seconds (default 30)
without saying it stopped is `dead`. Every call the hub serves for a worker (an API call, a git
fetch or push) counts as a heartbeat too (`Registry.flush_activity`, before each sweep): a hub
busy with 256 workers' calls got to their heartbeats too late and declared live workers dead.
A dead worker: its open claims end at once as `lapsed (worker dead)` (so
peers take the units now, not when the lease would have ended), its running sessions end as
`lost`, its open PRs get an `abandoned` event (whoever claims their files may take them over or
close them: swarm.workspace.takeover), and the tasks channel says so. A worker that was only
paused and comes back finds its
claims ended: the fencing checks refuse its late work (see swarm.context.store).

The same thread reconciles the embedded workspace every few seconds: a PR whose merge commit
is on main is marked merged even when the hub failed between moving main and recording it; and
a PR whose author gave up its claim is marked abandoned too (swarm.workspace.abandon).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import insert, select, update

from swarm.bootstrap import Runtime
from swarm.context.schema import claims, workers
from swarm.diskfull import is_disk_full
from swarm.hub.diskguard import DiskWatch
from swarm.worker.schema import sessions
from swarm.workspace.schema import pr_events, pull_requests

log = logging.getLogger("swarm.hub.liveness")

DEAD = "dead"
CLAIM_ENDING = "lapsed (worker dead)"
ALIVE_STATES = ("registered", "stopped", DEAD)  # states a sweep leaves alone


@dataclass(frozen=True)
class Death:
    worker: str
    silent_for: float
    claims: tuple[int, ...]
    sessions: int
    prs: tuple[int, ...]


def sweep(runtime: Runtime) -> list[Death]:
    """Declare dead every worker silent for longer than the run's dead-after time."""
    now = runtime.clock()
    cutoff = now - runtime.settings.dead_after
    with runtime.db.read() as conn:
        silent = conn.execute(
            select(workers.c.id, workers.c.name, workers.c.heartbeat_at).where(
                workers.c.state.not_in(ALIVE_STATES),
                workers.c.heartbeat_at.is_not(None),
                workers.c.heartbeat_at < cutoff,
            )
        ).all()
    deaths = []
    for worker_id, name, heartbeat_at in silent:
        with runtime.db.write() as conn:
            # Compare-and-set: a heartbeat that arrived meanwhile keeps the worker alive.
            marked = conn.execute(
                update(workers)
                .where(
                    workers.c.id == worker_id,
                    workers.c.state.not_in(ALIVE_STATES),
                    workers.c.heartbeat_at < cutoff,
                )
                .values(state=DEAD)
            ).rowcount
            if not marked:
                continue
            ended = tuple(
                conn.execute(
                    select(claims.c.id).where(
                        claims.c.owner_id == worker_id, claims.c.ended_at.is_(None)
                    )
                ).scalars()
            )
            if ended:
                conn.execute(
                    update(claims)
                    .where(claims.c.id.in_(ended), claims.c.ended_at.is_(None))
                    .values(ended_at=now, end_reason=CLAIM_ENDING)
                )
            lost = conn.execute(
                update(sessions)
                .where(sessions.c.worker_id == worker_id, sessions.c.ended_at.is_(None))
                .values(
                    ended_at=now,
                    ended="lost",
                    detail=f"the worker stopped sending heartbeats {now - heartbeat_at:.0f}s ago",
                )
            ).rowcount
            prs = tuple(
                conn.execute(
                    select(pull_requests.c.number).where(
                        pull_requests.c.author_id == worker_id, pull_requests.c.state == "open"
                    )
                ).scalars()
            )
            for number in prs:
                conn.execute(
                    insert(pr_events).values(
                        number=number,
                        created_at=now,
                        actor="hub",
                        kind="abandoned",
                        detail=f"{name} is dead; whoever claims its files may take it over "
                        f"(sw pr take {number}) or close it",
                    )
                )
        death = Death(name, now - heartbeat_at, ended, int(lost or 0), prs)
        deaths.append(death)
        log.warning(
            "%s is dead (no heartbeat for %.0fs): claims %s ended, %d session(s) lost, "
            "PRs %s abandoned",
            name, death.silent_for, list(ended), death.sessions, list(prs),
        )  # fmt: skip
        _announce(runtime, death)
    return deaths


def _announce(runtime: Runtime, death: Death) -> None:
    parts = [f"{death.worker} is dead (no heartbeat for {death.silent_for:.0f}s)."]
    if death.claims:
        ids = ", ".join(f"#{c}" for c in death.claims)
        parts.append(f"Its claims {ids} ended as {CLAIM_ENDING}: their scopes are free to claim.")
    if death.prs:
        numbers = ", ".join(f"#{n}" for n in death.prs)
        parts.append(
            f"Its open PRs {numbers} are abandoned: claim their files and take them over "
            "(sw pr take N), or close them."
        )
    try:
        runtime.messages.post("hub", " ".join(parts))
    except Exception:  # the announcement is a courtesy; the claims already ended
        log.exception("could not announce %s's death", death.worker)


class Upkeep:
    """One daemon thread: the liveness sweep and workspace reconciliation, every `interval`."""

    def __init__(
        self, runtime: Runtime, interval: float | None = None, disk: DiskWatch | None = None
    ) -> None:
        self.runtime = runtime
        self.disk = disk
        self.started = runtime.clock()
        self.interval = interval or max(0.5, min(2.0, runtime.settings.dead_after / 15))
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="hub-upkeep", daemon=True)

    def start(self) -> None:
        self.started = self.runtime.clock()
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)

    def heard_since(self) -> float:
        """Silence is only judged over time the hub could hear it: after a restart every
        worker's last heartbeat is as old as the outage, and while the disk was full the
        hub could not record the heartbeats it got."""
        quiet = self.disk.quiet_since() if self.disk is not None else 0.0
        return max(self.started, quiet)

    def _loop(self) -> None:
        while not self.done.wait(self.interval):
            # The calls this hub served count as heartbeats: recorded before anyone is judged.
            self._guarded("worker activity", self.runtime.registry.flush_activity)
            if self.runtime.clock() - self.heard_since() >= self.runtime.settings.dead_after:
                self._guarded("liveness sweep", lambda: sweep(self.runtime))
            workspace = self.runtime.workspace
            for what, name in (
                ("workspace reconciliation", "reconcile"),
                ("abandoned pull requests", "sweep_abandoned"),  # swarm.workspace.abandon
            ):
                step = getattr(workspace, name, None)
                if callable(step):
                    self._guarded(what, step)

    def _guarded(self, what: str, step: Callable[[], object]) -> None:
        try:
            step()
        except Exception as exc:  # a database blip, a full disk: the next turn tries again
            if self.disk is not None and is_disk_full(exc):
                self.disk.failed(f"{what}: {type(exc).__name__}: {exc}")
            else:
                log.exception("%s failed", what)
