"""The simulated harness: a scripted worker (no LLM) that follows the cooperation loop through
the same hub operations and real git, replaying a task's known solution one unit at a time.

It exists for tests, demos and scale runs on machines without a model. Each session it reads
the active claims, picks a unit that is neither claimed nor known to be merged, claims it
(yielding to an earlier claim on the same unit, by DM), brings its checkout up to main, "thinks",
applies the unit, verifies, opens and merges a pull request (merging main in on a conflict), and
records a PATCH_SUMMARY.

Why that order (it is what keeps duplicated work near zero at 1,024 workers): a unit's claim ends
with its PATCH_SUMMARY, which is recorded after the merge. So once our claim stands, every peer
that finished the unit earlier has already moved main: checking main *after* claiming catches it;
checking before (the old order) let a worker redo a unit merged between its fetch and its claim.
What a worker knows is merged comes from its checkout of main and from the PATCH_SUMMARY entries
the hub delivers with every answer, so an idle worker neither fetches nor claims to find out.
"""

from __future__ import annotations

import json
import logging
import random
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm.errors import InvalidInput
from swarm.harness import SessionContext, SessionResult
from swarm.harness.sim_units import is_hazard_task, load_sim_units, read_files
from swarm.sandbox import Box
from swarm.sandbox import run as run_in
from swarm.tasks.units import Unit, UnitAlreadyApplied, apply_unit, parse_units
from swarm.tools.client import HubClient, HubError
from swarm.worker.runtime import HUB_TIMEOUT

log = logging.getLogger("swarm.harness.sim")

NO_WORK_LEFT = "no work left"
MAX_MERGE_ATTEMPTS = 4
RENEW_EVERY = 30.0  # seconds: a claim is renewed this often while its unit is worked on
CLAIMS_LIMIT = 5000  # the hub's maximum; its default (500) hides claims past 1,024 workers
# An idle worker polls the claims at most this far apart (with jitter), longer in a big team:
# 1,024 idle workers listing 1,024 claims every 8 s kept the hub busy on that alone. A claim
# freed by a peer's death waits this long (x1.5) at most: the hub declares a worker dead 30 s
# after its last call, and the units it held must be taken again within 45 s of a crash.
IDLE_PAUSE_MAX = 4.0
TRANSCRIPT_STEPS = 2000  # steps kept of one session's transcript
TRANSCRIPT_CHARS = 1000  # characters kept of one step's command and of its output
STEAL_CONFIRM = 1.0  # seconds between the two looks before taking a unit at a peer's place
IDLE_POLLS_PER_SECOND = 32.0  # the whole team's idle polls, roughly, once they back off
IDLE_PAUSE_CAP = 30.0
# A unit with files of its own may start from a main this old (seconds): the hub merges it onto
# the newest main; the age only bounds how long a merge nobody reported (a crashed peer) can hide.
SYNC_MAX_AGE = 300.0
GREP_PAGE = 500  # the hub's largest grep page
SESSION_STEP_MARGIN = 30  # another unit in this session only while this many steps remain
DONE_RE = re.compile(r"^unit (\S+) (?:\(|is already on main)")
GAP_RE = re.compile(r"--after (\d+) --before (\d+)")


# What the hub's git route prints when a worker exceeds SWARM_RATE_GIT_PER_MINUTE.
GIT_RATE_LIMITED = re.compile(r"too many git operations from \S+; try again in (\d+) s")
GIT_RATE_RETRIES = 5


@dataclass
class _WorkerState:
    """What one worker knows across its sessions (the harness object serves every worker of
    a process, so this is kept per worker)."""

    done: set[str] = field(default_factory=set)  # units known to be merged on main
    main: str = ""  # the main commit the checkout was last brought up to
    synced: float = 0.0  # time.monotonic() of that
    dirty: bool = True  # the work branch holds something other than `main`
    # Entry-id windows (after, before) whose entries a delivery did not show (it shows the
    # newest few): the worker greps them for PATCH_SUMMARY before it picks its next unit.
    gaps: list[tuple[int, int]] = field(default_factory=list)


def unit_topic(unit: Unit) -> str:
    return f"topic:unit-{unit.id}".lower()


def is_applied(unit: Unit, root: Path) -> bool:
    for edit in unit.edits:
        path = root / edit.path
        if not path.is_file():
            return False
        text = path.read_text(encoding="utf-8")
        if (edit.old and edit.old in text) or edit.new not in text:  # (empty old: a new file)
            return False
    return True


def applied_on(units: list[Unit], box: Box, rev: str) -> set[str]:
    """The units whose solution is in `rev`'s tree, read from git's objects in one process (a
    sparse checkout holds only the files at hand)."""
    paths = sorted({edit.path for unit in units for edit in unit.edits})
    if not paths:
        return set()
    texts = read_files(box, rev, paths)
    return {
        unit.id
        for unit in units
        if all(
            e.path in texts and not (e.old and e.old in texts[e.path]) and e.new in texts[e.path]
            for e in unit.edits
        )
    }


class SimHarness:
    name = "sim"
    sparse_checkout = True  # the runtime checks out top-level files; a session adds its unit's

    def __init__(
        self,
        *,
        solution: str | Path | None = None,
        task_name: str = "this task",
        think: float = 1.0,
        fact_rate: float = 0.2,
        wait_for_work: float = 120.0,
        seed: int | None = None,
        team_size: int = 1,
        log_dir: str | Path | None = None,
        attempts_dir: str | Path | None = None,
    ) -> None:
        if solution is None or not Path(solution).is_file():
            raise InvalidInput(
                f"the simulated harness replays a task's known solution, and {task_name} ships "
                "none (no `solution` in its task.toml). Use a task with solution units, or "
                "--harness mini with --model"
            )
        text = Path(solution).read_text(encoding="utf-8")
        self.units = parse_units(text, str(solution))
        # A hazard task, or any run without some mechanism, is worked by the switch-aware
        # policy (swarm.harness.sim_hazard); its checks need the whole checkout.
        self.sim_units = load_sim_units(text, str(solution))
        self.hazard = is_hazard_task(text)
        if self.hazard:
            self.sparse_checkout = False
        self.attempts_dir = Path(attempts_dir) if attempts_dir else None
        self.think = think
        self.fact_rate = fact_rate
        self.wait_for_work = wait_for_work
        self.seed = seed
        self.team_size = max(1, int(team_size))
        self.log_dir = Path(log_dir) if log_dir else None  # a transcript per session, if set
        # An idle worker re-lists the claims this often (seconds); in between it only reads its
        # delivery. A claim released or lapsed without a PATCH_SUMMARY waits that long at most.
        self.relist_every = max(IDLE_PAUSE_MAX, self.team_size / 8)
        self.idle_pause_max = min(
            IDLE_PAUSE_CAP, max(IDLE_PAUSE_MAX, self.team_size / IDLE_POLLS_PER_SECOND)
        )
        self._states: dict[str, _WorkerState] = {}
        owners: dict[str, int] = {}
        files = {u.id: {e.path for e in u.edits} for u in self.units}
        for unit in self.units:
            for path in files[unit.id]:
                owners[path] = owners.get(path, 0) + 1
        # Units sharing a file with another unit conflict unless started from a fresh main.
        self.shares_files = {u.id: any(owners[p] > 1 for p in files[u.id]) for u in self.units}
        self._lock = threading.Lock()

    def state(self, worker: str) -> _WorkerState:
        with self._lock:
            return self._states.setdefault(worker, _WorkerState())

    def run_session(self, ctx: SessionContext) -> SessionResult:
        if self.hazard or ctx.without:
            from swarm.harness.sim_hazard import HazardSession

            return HazardSession(self, ctx, self.sim_units).run()
        session = _Session(self, ctx)
        try:
            return session.run()
        finally:
            session.save_transcript()


class _Session:
    def __init__(self, harness: SimHarness, ctx: SessionContext) -> None:
        self.h = harness
        self.ctx = ctx
        self.steps = 0
        self.client = HubClient(
            ctx.env["SWARM_HUB_URL"], ctx.env["SWARM_TOKEN"], timeout=HUB_TIMEOUT
        )
        seed = harness.seed if harness.seed is not None else hash((ctx.worker, time.time()))
        self.rng = random.Random(f"{seed}-{ctx.worker}-{ctx.number}")
        self.known = harness.state(ctx.worker)
        self.by_id = {u.id: u for u in harness.units}
        self.transcript: list[dict[str, str]] = []

    def note(self, command: str, output: str) -> None:
        """One step of the transcript the dashboard shows (bounded: a session may be long)."""
        if len(self.transcript) < TRANSCRIPT_STEPS:
            self.transcript.append({"command": command[:TRANSCRIPT_CHARS],
                                    "output": output[-TRANSCRIPT_CHARS:]})  # fmt: skip

    def save_transcript(self) -> None:
        if self.h.log_dir is None:
            return
        path = self.h.log_dir / f"{self.ctx.worker}-session{self.ctx.number}.sim.json"
        try:
            self.h.log_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"steps": self.transcript}), encoding="utf-8")
        except OSError as exc:
            # A full disk: the transcript is for reading later; failing the session over it
            # (or hiding why the session ended, from a `finally`) would cost more.
            log.warning("%s: could not save the transcript %s: %s", self.ctx.worker, path, exc)

    # -- small tools ------------------------------------------------------------------------
    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.steps += 1
        sent = f" {json.dumps(kwargs.get('json') or kwargs.get('params'))}" if kwargs else ""
        try:
            answer = self.client.call(method, path, **kwargs)
        except Exception as exc:
            self.note(f"{method} {path}{sent}", f"error: {exc}")
            raise
        self.note(f"{method} {path}{sent}", json.dumps(answer.get("result"))[:TRANSCRIPT_CHARS])
        self.ctx.on_step(f"{method} {path}")
        self.learn(answer.get("delivery"))
        return answer

    def learn(self, delivery: dict[str, Any] | None) -> None:
        """Note the units peers report merged (PATCH_SUMMARY) or found on main (OBSERVED), and
        the window of entries the delivery left out (it shows the newest few and a count)."""
        self.note_done((delivery or {}).get("entries") or ())
        if (delivery or {}).get("more"):
            gap = GAP_RE.search(str(delivery.get("grep", "")))  # type: ignore[union-attr]
            if gap:
                self.known.gaps.append((int(gap.group(1)), int(gap.group(2))))

    def note_done(self, entries: Any) -> None:
        for entry in entries:
            if entry.get("type") in ("PATCH_SUMMARY", "OBSERVED"):
                found = DONE_RE.match(str(entry.get("body", "")))
                if found and found.group(1) in self.by_id:
                    self.known.done.add(found.group(1))

    def catch_up(self) -> None:
        """Grep the entries deliveries left out for PATCH_SUMMARYs (one indexed query a page),
        instead of learning about each missed merge by claiming the unit or fetching main."""
        while self.known.gaps:
            after = min(a for a, _b in self.known.gaps)
            before = max(b for _a, b in self.known.gaps)
            self.known.gaps.clear()
            while before > after + 1:
                # "." as the delivery's own hint says: no literal, so the hub scans just this
                # id window (a literal such as "unit " sent every grep through the full-text
                # index's every match: p50 0.9 s at 1,024 workers).
                found = self.call(
                    "GET",
                    "/v1/grep",
                    params={
                        "pattern": ".",
                        "type": ["PATCH_SUMMARY"],
                        "after": after,
                        "before": before,
                        "limit": GREP_PAGE,
                    },
                )["result"]
                entries = found["entries"]
                self.note_done(entries)
                if not found["truncated"] or not entries:
                    break
                before = min(int(e["id"]) for e in entries)  # newest first: page backwards

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        self.steps += 1
        for _ in range(GIT_RATE_RETRIES):
            # Through the session's sandbox, as an agent's commands run.
            done = run_in(self.ctx.sandbox(), ["git", *args], timeout=600)
            self.note("git " + " ".join(args), (done.stdout + done.stderr).strip())
            # The hub's per-worker limit on git operations says how long to wait: do as told.
            wait = GIT_RATE_LIMITED.search(done.stderr) if done.returncode else None
            if wait is None or not self.sleep(float(wait.group(1))):
                break
        if check and done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()[-400:]}")
        return done

    def record(self, kind: str, body: str, **fields: Any) -> dict[str, Any]:
        return self.call("POST", "/v1/entries", json={"type": kind, "body": body, **fields})

    def think(self, seconds: float, claim_id: int) -> bool:
        """Work for `seconds`, renewing the claim on the way as the prompt tells agents to (a
        think longer than a lease would otherwise lose the claim)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > RENEW_EVERY:
            if not self.sleep(RENEW_EVERY):
                return False
            if not self.renew(claim_id):
                return True  # lapsed: the renewal after thinking says so
        return self.sleep(left)

    def renew(self, claim_id: int) -> bool:
        """Renew our claim; False when fencing refuses (it lapsed or the hub ended it)."""
        try:
            self.call("POST", f"/v1/claims/{claim_id}/renew", json={})
        except HubError as exc:
            if exc.status in (403, 409):
                return False
            raise
        return True

    def sleep(self, seconds: float) -> bool:
        """Think; False when the worker was told to stop meanwhile."""
        return not self.ctx.stop.wait(max(0.0, seconds))

    def result(self, ended: str, detail: str) -> SessionResult:
        self.client.close()
        return SessionResult(ended, steps=self.steps, detail=detail)  # type: ignore[arg-type]

    # -- the loop ---------------------------------------------------------------------------
    def start(self) -> None:
        """A new checkout (a local clone of a seed of main): learn what is merged from the
        context (every PATCH_SUMMARY, a few pages of one indexed grep), not by fetching main
        through the hub, which 1,024 workers starting together made a storm of git fetches."""
        self.known.main = self.git("rev-parse", "origin/main").stdout.strip()
        self.known.synced = time.monotonic()
        self.known.dirty = True
        self.known.gaps.append((0, 2**62))
        self.catch_up()

    def sync(self) -> None:
        """Bring the work branch to the hub's main, fetching only when main moved (and only
        main: fetching every worker's branch would cost each clone O(workers) refs)."""
        main = str(self.call("GET", "/v1/workspace")["result"]["main"])
        if main != self.known.main:
            self.git(
                "fetch", "-q", "--no-tags", "origin", "+refs/heads/main:refs/remotes/origin/main"
            )
            self.known.main = main
            self.known.dirty = True
        self.known.synced = time.monotonic()
        self.reset()
        pending = [u for u in self.h.units if u.id not in self.known.done]
        self.known.done.update(applied_on(pending, self.ctx.sandbox(), "origin/main"))

    def reset(self, unit: Unit | None = None) -> None:
        """Put the work branch back on the last fetched main (no network), with `unit`'s files
        checked out (the checkout is sparse when the runtime made it so)."""
        sparse = self.ctx.workdir / ".git" / "info" / "sparse-checkout"
        if sparse.is_file():
            paths = sorted({e.path for e in unit.edits}) if unit else []
            wanted = "/*\n!/*/\n" + "".join(f"/{p}\n" for p in paths)
            if sparse.read_text() != wanted:
                sparse.write_text(wanted)
                self.known.dirty = True
        if self.known.dirty:
            self.git("checkout", "-q", "-f", "-B", f"{self.ctx.worker}/work", "origin/main")
            self.known.dirty = False

    def run(self) -> SessionResult:
        """Iterations of the loop, back to back, as an agent's session goes on while it has
        steps left (a session per unit cost 4 more hub calls a unit: start, end, heartbeat,
        channel); the session ends when no unit is free, its steps run low or it is told."""
        if not self.known.main:
            self.start()
        merged: list[str] = []
        started = time.monotonic()
        limits = self.ctx.limits
        while not self.ctx.stop.is_set():
            if merged and (
                self.steps + SESSION_STEP_MARGIN > limits.max_steps
                or time.monotonic() - started > limits.max_seconds / 2
            ):
                break
            # Each iteration starts by reading the channel (`sw inbox`), through this session's
            # own client: the answer's delivery block (peers' PATCH_SUMMARYs) must reach
            # `learn`, or the worker would go on to claim units it was told are merged.
            self.call("GET", "/v1/inbox")
            outcome = self.iteration()
            if outcome is None:
                break  # told to stop
            ended, detail, unit_id = outcome
            if unit_id is None:
                if merged:  # (the detail keeps its start: the runtime reads NO_WORK_LEFT)
                    detail = f"{detail} (merged {', '.join(merged)} first)"
                return self.result(ended, detail)
            merged.append(unit_id)
        if merged:
            return self.result("submitted", f"merged units {', '.join(merged)}")
        return self.result("stopped", "told to stop")

    def pick(self, free: list[Unit], busy: set[str], *, steal: bool = True) -> Unit | None:
        """A worker starts with the units at its own place in the list (worker k of N looks
        first at the k-th N-th of it), then takes a free one at the place of a worker that
        held no claim at the last two listings (`busy`: those that did): peers reading the
        same claims list then rarely reach for the same unit at the same moment, and a worker
        on its own place's next unit is not raced for it. A habit of each worker, not an
        assignment: a unit whose worker is idle or gone is free to anyone. None: no unit of its
        own, and `steal` is off or every free unit's worker is on it."""
        units = self.h.units
        try:
            index = int(re.sub(r"\D", "", self.ctx.worker)) - 1
        except ValueError:
            return self.rng.choice(free)
        team = self.h.team_size

        def place(k: int) -> range:
            return range(k * len(units) // team, (k + 1) * len(units) // team)

        mine = {units[i].id for i in place(index % team)}
        own = [u for u in free if u.id in mine]
        if own:
            return own[0]
        if not steal:
            return None
        position = {u.id: i for i, u in enumerate(units)}
        # Worker k's place holds unit i when k = the largest k with k * len // team <= i.
        holder = {u.id: (position[u.id] * team + team - 1) // len(units) for u in free}
        unheld = [u for u in free if f"w{holder[u.id] + 1}" not in busy]
        return self.rng.choice(unheld) if unheld else None

    def iteration(self) -> tuple[str, str, str | None] | None:
        """One turn of the loop: (ending, detail, the unit merged or None), None when told to
        stop."""
        waited = 0.0
        pause = min(1.0, 0.2 + self.h.think / 2)
        claimed: set[str] | None = None
        busy: set[str] = set()
        busy_before: set[str] | None = None  # peers holding a claim at this turn's last listing
        steal = False
        listed = 0.0
        while not self.ctx.stop.is_set():
            if claimed is None or time.monotonic() - listed > self.h.relist_every:
                claimed, holding = self.claimed_topics()
                # Busy at this listing or the one before: a peer between two units of its own
                # place holds no claim for a moment, and must not be raced for the next one.
                steal = busy_before is not None
                busy, busy_before = holding | (busy_before or set()), holding
                listed = time.monotonic()
            else:
                # Idle, every open unit claimed when last listed: what can change is a peer's
                # PATCH_SUMMARY (the delivery of a cheap call says so), or a claim released or
                # lapsed without one (seen at the next listing). 1,024 idle workers listing
                # 1,024 claims was 40% of the hub's time.
                self.call("GET", "/v1/whoami")
            self.catch_up()
            open_units = [u for u in self.h.units if u.id not in self.known.done]
            if not open_units:
                return "stopped", f"{NO_WORK_LEFT}: every unit is merged on main", None
            free = [u for u in open_units if unit_topic(u) not in claimed]
            unit = self.pick(free, busy, steal=steal) if free else None
            if unit is None and free and not steal:
                # Only units at peers' places are free: look again in a moment, and take one
                # only if its peer held no claim at either look.
                nap = STEAL_CONFIRM * self.rng.uniform(0.5, 1.5)
                if not self.sleep(nap):
                    break
                waited += nap
                claimed = None
                continue
            if unit is None:
                if waited >= self.h.wait_for_work:
                    return "submitted", "every open unit is claimed by a peer", None
                nap = pause * self.rng.uniform(0.5, 1.5)  # jitter: idle peers must not sync up
                if not self.sleep(nap):
                    break
                waited += nap
                pause = min(self.h.idle_pause_max, pause * 1.5)
                continue
            claim_id = self.claim(unit)
            if claim_id is None:
                claimed = None  # a peer was first: list again, pick again
                continue
            # Our claim stands, so whoever finished this unit before us has merged it and said
            # so (PATCH_SUMMARY ends the claim): ask the context, then (if need be) main.
            if self.reported_merged(unit):
                self.known.done.add(unit.id)
                self.sync()  # our view was stale: learn every merge at once, not unit by unit
            elif self.h.shares_files[unit.id] or (
                time.monotonic() - self.known.synced > SYNC_MAX_AGE
            ):
                self.sync()  # a fresh base: fewer conflicts; also catches unreported merges
            if unit.id not in self.known.done:
                self.reset(unit)  # (independent files: the hub merges onto any newer main)
            if unit.id in self.known.done:
                self.call("POST", f"/v1/claims/{claim_id}/release")
                continue
            return self.work(unit, claim_id)
        return None

    def reported_merged(self, unit: Unit) -> bool:
        """Did a peer record this unit's PATCH_SUMMARY (context grep; one indexed query)?"""
        found = self.call(
            "GET",
            "/v1/grep",
            params={
                "pattern": f"^unit {re.escape(unit.id)} \\(",
                "type": ["PATCH_SUMMARY"],
                "limit": 1,
            },
        )["result"]["entries"]
        return bool(found)

    def claimed_topics(self) -> tuple[set[str], set[str]]:
        """The scope items peers' active claims hold, and the peers holding them."""
        answer = self.call("GET", "/v1/claims", params={"limit": CLAIMS_LIMIT})
        claims = [c for c in answer["result"]["claims"] if c["owner"] != self.ctx.worker]
        return {s for c in claims for s in c["scope"]}, {c["owner"] for c in claims}

    def claim(self, unit: Unit) -> int | None:
        answer = self.record(
            "CLAIM", f"unit {unit.id}: {unit.title}", scope=[*unit.scope, unit_topic(unit)]
        )["result"]
        mine = int(answer["entry"]["id"])
        rivals = [c for c in answer["overlaps"] if unit_topic(unit) in c["scope"]]
        if rivals:  # the same unit: the earlier claim keeps it, as agreed by DM
            first = min(rivals, key=lambda c: c["id"])
            self.call("POST", f"/v1/claims/{mine}/release")
            self.call(
                "POST",
                "/v1/dm",
                json={
                    "to": first["owner"],
                    "body": f"unit {unit.id} is yours (your claim "
                    f"#{first['id']} came first); I released my claim #{mine}.",
                },
            )
            return None
        return mine

    def work(self, unit: Unit, claim_id: int) -> tuple[str, str, str | None] | None:
        if not self.think(self.h.think * self.rng.uniform(0.5, 1.5), claim_id):
            self.call("POST", f"/v1/claims/{claim_id}/release")
            return None
        if not self.renew(claim_id):  # paused past the lease: a peer may have the unit now
            return "submitted", f"unit {unit.id}: claim #{claim_id} lapsed; left to peers", None
        self.known.dirty = True  # whatever happens next, the work branch leaves main
        try:
            changed = apply_unit(unit, self.ctx.workdir)
        except UnitAlreadyApplied:
            self.known.done.add(unit.id)
            self.record(
                "OBSERVED", f"unit {unit.id} is already on main; nothing to do", refs=[claim_id]
            )
            self.call("POST", f"/v1/claims/{claim_id}/release")
            return "submitted", f"unit {unit.id} was already merged", None
        problem = self.verify(changed)
        if problem:
            self.record("FAIL", f"unit {unit.id}: verification failed: {problem}", refs=[claim_id])
            return "error", f"unit {unit.id} did not verify", None
        branch = f"{self.ctx.worker}/unit-{unit.id}"
        self.git("add", "--", *changed)
        self.git("commit", "-q", "--no-verify", "-m", f"unit {unit.id}: {unit.title}")
        self.git("push", "-q", "-f", "--no-verify", "origin", f"HEAD:refs/heads/{branch}")
        pr = self.open_pr(branch, unit, changed)
        merged = self.merge(int(pr["number"]), branch, claim_id, unit)
        if merged is None and unit.id in self.known.done:
            return "submitted", f"unit {unit.id} was already merged", None
        if merged is None:
            return "error", f"unit {unit.id}: PR #{pr['number']} could not merge", None
        self.known.done.add(unit.id)
        try:
            self.record(
                "PATCH_SUMMARY",
                f"unit {unit.id} ({unit.title}): applied the known solution to "
                f"{', '.join(changed)}; py_compile passed; merged PR #{pr['number']} as "
                f"{str(merged['merge_commit'])[:10]}.",
                refs=[claim_id],
            )
        except HubError as exc:
            if exc.status != 409:
                raise
            # The claim lapsed after the merge (fencing refused the summary): peers still
            # learn the unit is on main.
            self.record("OBSERVED", f"unit {unit.id} is already on main (PR #{pr['number']})")
        if self.rng.random() < self.h.fact_rate:
            self.record(
                "FACT",
                f"{unit.title} is implemented in {', '.join(changed)} on main "
                f"(PR #{pr['number']}).",
                scope=list(unit.scope),
            )
        return "submitted", f"merged unit {unit.id} as PR #{pr['number']}", unit.id

    def open_pr(self, branch: str, unit: Unit, changed: list[str]) -> dict[str, Any]:
        """Open the PR, or take up this branch's PR still open from an attempt that failed
        (the push above updated it), as the hub's refusal says to."""
        try:
            return dict(
                self.call(
                    "POST",
                    "/v1/prs",
                    json={
                        "branch": branch,
                        "title": f"unit {unit.id}: {unit.title}",
                        "body": f"Implements {unit.title} in {', '.join(changed)}. "
                        "Verified: py_compile.",
                    },
                )["result"]["pr"]
            )
        except HubError as exc:
            if exc.status != 409:
                raise
            mine = self.call(
                "GET",
                "/v1/prs",
                params={
                    "state": "open",
                    "author": self.ctx.worker,
                    "limit": 500,
                },
            )["result"]["prs"]
            for pr in mine:
                if pr.get("branch") == branch:
                    return dict(pr)
            raise

    def already_merged(self, unit: Unit, claim_id: int, number: int) -> None:
        """Main holds the unit though nobody said so (its merge's PATCH_SUMMARY was lost, e.g.
        to a full disk): say it, so no peer redoes it, and free the claim."""
        self.known.done.add(unit.id)
        self.record(
            "OBSERVED",
            f"unit {unit.id} is already on main: PR #{number} would change nothing",
            refs=[claim_id],
        )
        try:
            self.call("POST", f"/v1/claims/{claim_id}/release")
        except HubError as exc:
            if exc.status != 409:  # it ended already (lapsed and ended by the hub)
                raise

    def verify(self, changed: list[str]) -> str | None:
        for path in changed:
            if path.endswith(".py"):
                source = (self.ctx.workdir / path).read_bytes()
                try:  # py_compile's check, without writing __pycache__ into the checkout
                    compile(source, path, "exec", dont_inherit=True)
                except (SyntaxError, ValueError) as exc:
                    return f"{type(exc).__name__}: {exc}"
        return None

    def merge(self, number: int, branch: str, claim_id: int, unit: Unit) -> dict[str, Any] | None:
        for _attempt in range(MAX_MERGE_ATTEMPTS):
            try:
                answer = self.call("POST", f"/v1/prs/{number}/merge", json={"claim": claim_id})
                return dict(answer["result"]["pr"])
            except HubError as exc:
                if exc.status == 409 and not exc.payload.get("files"):
                    # Our first merge went through but its answer was lost (a hub restart, a
                    # database blip): the PR says so.
                    pr = self.call("GET", f"/v1/prs/{number}")["result"]["pr"]
                    if pr["state"] == "merged":
                        return dict(pr)
                    # Fenced (our claim lapsed) or a duplicate of what main holds: not ours
                    # to merge any more; a duplicate PR is closed so nobody merges it later.
                    if exc.payload.get("kind") == "DuplicateMerge":
                        self.call("POST", f"/v1/prs/{number}/close")
                        self.already_merged(unit, claim_id, number)
                    return None
                if exc.status != 409:
                    raise
                files = ", ".join(exc.payload["files"])
                self.record(
                    "OBSERVED",
                    f"PR #{number} conflicts with main in {files}; merging main in",
                    refs=[claim_id],
                )
            self.git(
                "fetch", "-q", "--no-tags", "origin", "+refs/heads/main:refs/remotes/origin/main"
            )
            if self.git("merge", "-q", "--no-edit", "origin/main", check=False).returncode != 0:
                self.git("merge", "--abort", check=False)
                self.record(
                    "FAIL",
                    f"unit {unit.id}: merging main into {branch} conflicts in "
                    f"{files}; leaving it for a fresh attempt",
                    refs=[claim_id],
                )
                return None
            self.git("push", "-q", "-f", "origin", f"HEAD:refs/heads/{branch}")
        return None
