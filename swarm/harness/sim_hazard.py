"""The sim policy that follows the prompt's loop with whatever mechanisms the run has.

A test double, not a claim about agents: a scripted worker that uses each mechanism exactly as
the prompt tells agents to, so that a run without one (swarm.switches) shows what that
mechanism was worth on a hazard task (swarm.tasks.hazard). Per iteration it:

1. reads the channel (`sw inbox`, or `sw whoami` without it) and learns from the delivery block;
   brings its checkout to main when main moved (what main holds is done);
2. picks a unit nobody holds (the claims list) whose known dependencies are merged, and greps
   the context for the unit's FAIL, FACT and OBSERVED entries (a pitfall's reason, a missing
   dependency, the real file of a hidden scope);
3. claims it; an overlap on the same unit goes to the earlier claim; an overlap on a hotspot
   file is agreed by DM (both go on, on different lines; the second to merge merges main in)
   or, without DMs, left to the earlier claim (released, the unit left alone for a while);
4. works (`think` seconds; a hidden scope nobody recorded costs an investigation, recorded as an
   OBSERVED), applies the unit (a pitfall it does not know is fallen into with the unit's
   odds), runs the unit's check;
5. on a failure records a FAIL with the reason (or releases its claim) and ends the session: the
   next session starts with a fresh memory, as an agent's does, and knows only what the hub
   holds;
6. otherwise commits, merges main in (a hotspot conflict is resolved by re-applying the unit on
   the new main), re-tests, opens and merges a PR, and records a PATCH_SUMMARY.

Randomness (think times, pitfalls, choices) comes from the seed (SWARM_SEED, else the task's)
and the worker's name and session. Each attempt is written to `attempts/<worker>.jsonl` beside
the workers' checkouts, for the measures (swarm.report.measures): a run without the context
records no FAIL, yet its repeated failures must be counted the same way.
"""

from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING, Any

from swarm.harness import SessionContext, SessionResult
from swarm.harness.sim_units import (
    Knowledge,
    SimUnit,
    apply,
    attempt_record,
    on_main,
    read_files,
)
from swarm.sandbox import run as run_in
from swarm.switches import enabled
from swarm.tools.client import HubClient, HubError
from swarm.worker.runtime import HUB_TIMEOUT

if TYPE_CHECKING:
    from swarm.harness.sim import SimHarness

NO_WORK_LEFT = "no work left"
MERGE_ATTEMPTS = 12
STEP_MARGIN = 25  # another unit only while this many steps remain
MISSING_RE = re.compile(r"NotImplementedError: (f\w+)")
RATE_RE = re.compile(r"too many git operations .*try again in (\d+(?:\.\d+)?) s")
GIT_RETRIES = 8
IDLE_PAUSE = 0.5  # seconds an idle worker first waits before it looks again
IDLE_PAUSE_CAP = 10.0


class HazardSession:
    def __init__(self, harness: SimHarness, ctx: SessionContext, units: list[SimUnit]) -> None:
        self.h = harness
        self.ctx = ctx
        self.units = units
        self.by_id = {u.id: u for u in units}
        self.by_function = {u.hazards.function: u for u in units if u.hazards.function}
        self.on = enabled(ctx.without)
        self.client = HubClient(
            ctx.env["SWARM_HUB_URL"], ctx.env["SWARM_TOKEN"], timeout=HUB_TIMEOUT
        )
        seed = os.environ.get("SWARM_SEED") or (units[0].hazards.seed if units else 0)
        import random

        self.rng = random.Random(f"{seed}-{ctx.worker}-{ctx.number}")
        self.know = Knowledge()
        self.steps = 0
        self.main = ""
        self.checked_out: set[str] = set()  # the units the checkout's main holds
        self.base = ""  # the newest main the work branch holds
        self.dirty = True  # the work branch may hold something other than main
        self.paths = sorted({e.path for u in units for e in u.unit.edits})

    # -- tools ------------------------------------------------------------------------------
    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.steps += 1
        answer = self.client.call(method, path, **kwargs)
        self.ctx.on_step(f"{method} {path}")
        self.learn(answer.get("delivery") or {})
        return answer

    def record(self, kind: str, body: str, **fields: Any) -> dict[str, Any]:
        return self.call("POST", "/v1/entries", json={"type": kind, "body": body, **fields})

    def git(self, *args: str, check: bool = True) -> str:
        self.steps += 1
        for _ in range(GIT_RETRIES):
            done = run_in(self.ctx.sandbox(), ["git", *args], timeout=600)
            slow = RATE_RE.search(done.stderr) if done.returncode else None
            if slow is None or not self.sleep(float(slow.group(1)) + self.rng.random()):
                break  # (the hub's git rate limit says when to try again, as an agent reads)
        if check and done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()[-400:]}")
        return done.stdout if done.returncode == 0 else ""

    def sleep(self, seconds: float) -> bool:
        return not self.ctx.stop.wait(max(0.0, seconds))

    def log(self, unit: SimUnit, began: float, outcome: str, reason: str = "") -> None:
        folder = self.h.attempts_dir
        if folder is None:
            return
        folder.mkdir(parents=True, exist_ok=True)
        line = attempt_record(
            worker=self.ctx.worker, unit=unit.id, began=began, ended=time.time(),
            outcome=outcome, reason=reason, without=list(self.ctx.without),
        )  # fmt: skip
        with (folder / f"{self.ctx.worker}.jsonl").open("a", encoding="utf-8") as out:
            out.write(line)

    # -- knowing ----------------------------------------------------------------------------
    def learn(self, delivery: dict[str, Any]) -> None:
        self.learn_entries(delivery.get("entries") or ())
        # DMs carry the negotiation of overlaps, which needs no answer from the sim: the claim's
        # answer already said which claim came first.

    def learn_entries(self, entries: Any) -> None:
        self.know.learn(entries, self.by_id)

    def look_up(self, unit: SimUnit) -> None:
        """Before acting, search the history for what peers found about the unit."""
        if not (self.on["context"] and self.on["grep"]):
            return
        found = self.call(
            "GET",
            "/v1/grep",
            params={"pattern": f"unit {unit.id}\\b", "type": ["FAIL", "FACT", "OBSERVED"],
                    "limit": 50},
        )["result"]["entries"]  # fmt: skip
        self.learn_entries(found)

    def sync(self) -> None:
        """Bring the checkout to main when main moved; what main holds is done."""
        main = str(self.call("GET", "/v1/workspace")["result"]["main"])
        if main != self.main:
            self.git(
                "fetch", "-q", "--no-tags", "origin", "+refs/heads/main:refs/remotes/origin/main"
            )
            self.main = main
            self.checked_out = on_main(
                self.units, read_files(self.ctx.sandbox(), "origin/main", self.paths)
            )
            self.know.done |= self.checked_out
            self.dirty = True
        if self.dirty:
            self.git("checkout", "-q", "-f", "-B", f"{self.ctx.worker}/work", "origin/main")
            self.dirty = False
        self.base = self.main  # the main the work branch holds

    def blocked(self, unit: SimUnit) -> bool:
        """It waits for a unit it knows it needs and does not know merged."""
        return bool(self.know.needs.get(unit.id, set()) - self.checked_out - self.know.done)

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> SessionResult:
        try:
            return self._run()
        finally:
            self.client.close()

    def _run(self) -> SessionResult:
        if self.on["context"]:  # `sw tail`: the newest findings, at the session's start
            self.learn_entries(
                self.call("GET", "/v1/entries", params={"limit": 100})["result"]["entries"]
            )
        merged: list[str] = []
        waited, pause = 0.0, IDLE_PAUSE
        # Idle workers back off (with jitter, longer in a big team): 64 idle workers polling
        # claims, main and git twice a second kept the hub and the git rate limit busy.
        longest = min(IDLE_PAUSE_CAP, max(2.0, self.h.team_size / 8))
        while not self.ctx.stop.is_set():
            if self.steps + STEP_MARGIN > self.ctx.limits.max_steps and merged:
                break
            self.call("GET", "/v1/inbox" if self.on["channel"] else "/v1/whoami")
            if not self.on["context"] or not self.main:
                # Without the context only main says what is merged; with it, the deliveries'
                # PATCH_SUMMARYs do, and main is fetched once a unit is picked.
                self.sync()
            open_units = [u for u in self.units if u.id not in self.know.done]
            if not open_units:
                return self.result("stopped", f"{NO_WORK_LEFT}: every unit is merged on main")
            unit = self.pick(open_units)
            if unit is None:
                if waited > self.h.wait_for_work:
                    return self.result("submitted", "every open unit is held or waits")
                nap = pause * self.rng.uniform(0.6, 1.4)
                waited, pause = waited + nap, min(longest, pause * 1.6)
                if not self.sleep(nap):
                    break
                continue
            waited, pause = 0.0, IDLE_PAUSE
            outcome = self.attempt(unit)
            if outcome == "merged":
                merged.append(unit.id)
            elif outcome == "failed":
                return self.result("submitted", f"unit {unit.id} failed; a fresh session next")
        return self.result("submitted" if merged else "stopped", f"merged {', '.join(merged)}")

    def result(self, ended: str, detail: str) -> SessionResult:
        return SessionResult(ended, steps=self.steps, detail=detail)  # type: ignore[arg-type]

    def pick(self, open_units: list[SimUnit]) -> SimUnit | None:
        """Its own place first (worker k of N starts at the k-th N-th of the list), then any
        unit nobody holds; never one known to wait for an unmerged unit."""
        held: set[str] = set()
        if self.on["claims"]:
            claims = self.call("GET", "/v1/claims", params={"limit": 5000})["result"]["claims"]
            held = {s for c in claims if c["owner"] != self.ctx.worker for s in c["scope"]}
        now = time.monotonic()

        def free_(u: SimUnit) -> bool:
            if f"topic:unit-{u.id}" in held or self.blocked(u):
                return False
            if self.know.deferred.get(u.id, 0.0) > now:
                return False
            # Without DMs nobody can agree on an order: a file a peer holds is left to it.
            return self.on["dms"] or not set(u.hazards.hotspots) & held

        free = [u for u in open_units if free_(u)]
        if not free:
            return None
        team = self.h.team_size
        digits = re.sub(r"\D", "", self.ctx.worker)
        k = (int(digits) - 1) % team if digits else 0
        place = range(k * len(self.units) // team, (k + 1) * len(self.units) // team)
        mine = {self.units[i].id for i in place}
        own = [u for u in free if u.id in mine]
        return own[0] if own else self.rng.choice(free)

    def attempt(self, unit: SimUnit) -> str:
        began = time.time()
        self.sync()  # from the newest main
        if unit.id in self.know.done:
            return "skipped"
        self.look_up(unit)
        if self.blocked(unit):
            return "skipped"
        claim_id = self.claim(unit)
        if claim_id is None and self.on["claims"]:
            return "skipped"
        if claim_id is not None:
            # Our claim stands, so whoever finished the unit before has merged it and said so:
            # main (or the delivery's PATCH_SUMMARY) tells, and the unit is left.
            self.sync()
            if unit.id in self.know.done:
                self.release(claim_id)
                return "skipped"
        think = self.h.think * self.rng.uniform(0.5, 1.5)
        if unit.hidden and unit.id not in self.know.homes:
            think *= unit.hazards.investigate  # nobody recorded where it is: find it
            self.know.homes[unit.id] = unit.hazards.real_file
            if self.on["context"]:
                self.record("OBSERVED", f"unit {unit.id}: {unit.hazards.function} is defined in "
                            f"{unit.hazards.real_file}, not {unit.hazards.file} (which only "
                            "re-exports it)", refs=[claim_id] if claim_id else [])  # fmt: skip
        if not self.sleep(think):
            self.end_claim(claim_id, None)
            return "stopped"
        naive = bool(unit.hazards.pitfall) and unit.id not in self.know.reasons
        naive = naive and self.rng.random() < unit.hazards.odds
        self.dirty = True
        if not apply(unit, self.ctx.workdir, naive=naive):  # the checkout's main has it all
            self.end_claim(claim_id, None)
            self.log(unit, began, "duplicate")
            return "duplicate"
        problem = self.check(unit)
        if problem:
            self.fail(unit, claim_id, problem, began)
            return "failed"
        return self.deliver(unit, claim_id, began)

    def reason(self, unit: SimUnit, problem: str) -> str:
        """The failure's reason, the same words for the same cause (what a FAIL records)."""
        missing = MISSING_RE.search(problem)
        function = missing.group(1) if missing else ""
        if function in self.by_function and function != unit.hazards.function:
            return f"needs unit {self.by_function[function].id} merged first"
        if unit.hazards.pitfall:
            return f"pitfall: {unit.hazards.pitfall}"
        return problem

    def check(self, unit: SimUnit) -> str:
        """The unit's visible check (the python of the session's sandbox), '' when it passes."""
        self.steps += 1
        if not unit.hazards.check:
            return ""
        done = run_in(self.ctx.sandbox(), ["python3", "-B", unit.hazards.check], timeout=120)
        out = (done.stdout + done.stderr).strip()
        return "" if done.returncode == 0 else (out.splitlines() or ["failed"])[-1][:300]

    def claim(self, unit: SimUnit) -> int | None:
        """Claim the unit; None when the run has no claims or an earlier claim keeps it."""
        if not self.on["claims"]:
            return None
        home = self.know.homes.get(unit.id, unit.hazards.file or unit.unit.scope[0])
        scope = [f"{home}::{unit.hazards.function}" if unit.hazards.function else home,
                 *unit.hazards.hotspots, f"topic:unit-{unit.id}"]  # fmt: skip
        answer = self.record("CLAIM", f"unit {unit.id}: {unit.unit.title}", scope=scope)["result"]
        mine = int(answer["entry"]["id"])
        earlier = [c for c in answer["overlaps"] if int(c["id"]) < mine]
        same = [c for c in earlier if f"topic:unit-{unit.id}" in c["scope"]]
        if same or (earlier and not self.on["dms"]):
            # The earlier claim keeps it: the same unit always; a shared file when the two
            # cannot agree on an order.
            self.know.deferred[unit.id] = time.monotonic() + self.h.think
            self.release(mine)
            if self.on["dms"]:
                self.call("POST", "/v1/dm", json={"to": same[0]["owner"], "body":
                          f"unit {unit.id} is yours (claim #{same[0]['id']} came first); I "
                          f"released my claim #{mine}."})  # fmt: skip
            return None
        for other in earlier:  # agreed by DM: both go on; the second to merge merges main in
            shared = ", ".join(sorted(set(other["scope"]) & set(scope))) or "a file"
            self.call("POST", "/v1/dm", json={"to": other["owner"], "body":
                      f"I also edit {shared} for unit {unit.id} (claim #{mine}), beside your "
                      f"claim #{other['id']}: different lines, so we both go on; whoever "
                      "merges second merges main in first and keeps both lines."})  # fmt: skip
        return mine

    def fail(self, unit: SimUnit, claim_id: int | None, problem: str, began: float) -> None:
        reason = self.reason(unit, problem)
        self.end_claim(claim_id, f"unit {unit.id}: {reason} (check: {problem})")
        self.log(unit, began, "failed", reason)

    def release(self, claim_id: int) -> None:
        """Release a claim; one the hub already ended (it lapsed) is left as it is."""
        try:
            self.call("POST", f"/v1/claims/{claim_id}/release")
        except HubError as exc:
            if exc.status not in (403, 409):
                raise

    def end_claim(self, claim_id: int | None, failure: str | None, *, lapsed: bool = False) -> None:
        """Record the failure (it ends the claim) or release the claim; a claim the hub already
        ended (lapsed) is left as it is, and a FAIL the hub's fencing refuses is recorded alone."""
        refs = [claim_id] if claim_id is not None and not lapsed else []
        try:
            if failure and self.on["context"]:
                self.record("FAIL", failure, refs=refs)
            elif claim_id is not None and refs:
                self.release(claim_id)
        except HubError as exc:
            if exc.status not in (403, 409):
                raise
            if failure and self.on["context"]:
                self.record("FAIL", failure)

    def deliver(self, unit: SimUnit, claim_id: int | None, began: float) -> str:
        branch = f"{self.ctx.worker}/unit-{unit.id}"
        self.git("add", "--", *self.files(unit))
        self.git("commit", "-q", "--no-verify", "-m", f"unit {unit.id}: {unit.unit.title}")
        number = None
        for attempt in range(MERGE_ATTEMPTS):
            if attempt and not self.sleep(self.rng.uniform(0.1, 0.4) * attempt):
                break  # told to stop
            merged_in = self.merge_main(unit)
            if merged_in is None:
                self.end_claim(claim_id, None)
                self.log(unit, began, "duplicate")
                if number is not None:
                    self.call("POST", f"/v1/prs/{number}/close")
                return "duplicate"
            if merged_in and (problem := self.check(unit)):  # re-test on the new main
                self.fail(unit, claim_id, problem, began)
                return "failed"
            self.git("push", "-q", "-f", "--no-verify", "origin", f"HEAD:refs/heads/{branch}")
            if number is None:
                number = int(self.call("POST", "/v1/prs", json={
                    "branch": branch, "title": f"unit {unit.id}: {unit.unit.title}",
                    "body": f"Implements unit {unit.id}; checked with {unit.hazards.check}."},
                )["result"]["pr"]["number"])  # fmt: skip
            try:
                body = {"claim": claim_id} if claim_id is not None else {}
                pr = self.call("POST", f"/v1/prs/{number}/merge", json=body)["result"]["pr"]
                break
            except HubError as exc:
                if exc.status == 409 and exc.payload.get("files"):
                    continue  # a conflict: merge main in again
                if exc.status not in (403, 409):
                    raise
                pr = self.call("GET", f"/v1/prs/{number}")["result"]["pr"]
                if pr["state"] == "merged":
                    break  # our merge went through; its answer was lost
                # A duplicate of main, or fenced (the claim lapsed: the hub took this worker
                # for dead and a peer may have the unit): not ours to merge any more.
                self.call("POST", f"/v1/prs/{number}/close")
                self.end_claim(claim_id, None, lapsed=exc.status == 409)
                duplicate = exc.payload.get("kind") == "DuplicateMerge"
                self.log(unit, began, "duplicate" if duplicate else "abandoned", exc.message[:200])
                return "duplicate" if duplicate else "abandoned"
        else:
            self.end_claim(claim_id, None)
            self.log(unit, began, "abandoned", "could not merge")
            return "abandoned"
        self.know.done.add(unit.id)
        self.finish(unit, claim_id, int(pr["number"]))
        self.log(unit, began, "merged")
        return "merged"

    def merge_main(self, unit: SimUnit) -> bool | None:
        """Merge main in; on a conflict (a hotspot), re-apply the unit on main. True when that
        brought something new (re-test), False when the branch already had main, None when
        main already holds all of the unit (a peer did it)."""
        main = str(self.call("GET", "/v1/workspace")["result"]["main"])
        if main == self.base:
            return False
        if main != self.main:
            self.git(
                "fetch", "-q", "--no-tags", "origin", "+refs/heads/main:refs/remotes/origin/main"
            )
            self.main = main
        self.base = main
        self.steps += 1
        merged = run_in(self.ctx.sandbox(), ["git", "merge", "-q", "--no-edit", "origin/main"])
        if merged.returncode == 0:
            return True if self.git("diff", "--name-only", "origin/main", "HEAD").strip() else None
        self.git("merge", "--abort", check=False)
        self.git("checkout", "-q", "-f", "-B", f"{self.ctx.worker}/work", "origin/main")
        if not apply(unit, self.ctx.workdir):
            return None
        self.git("add", "--", *self.files(unit))
        self.git("commit", "-q", "--no-verify", "-m", f"unit {unit.id}: {unit.unit.title}")
        return True

    @staticmethod
    def files(unit: SimUnit) -> list[str]:
        return sorted({e.path for e in unit.unit.edits})

    def finish(self, unit: SimUnit, claim_id: int | None, number: int) -> None:
        summary = (f"unit {unit.id} ({unit.unit.title}): merged PR #{number}; "
                   f"{unit.hazards.check or 'compile'} passed.")  # fmt: skip
        if self.on["context"]:
            try:
                self.record("PATCH_SUMMARY", summary, refs=[claim_id] if claim_id else [])
            except HubError as exc:  # the claim lapsed meanwhile: peers still learn of it
                if exc.status not in (403, 409):
                    raise
                self.record("PATCH_SUMMARY", summary)
            for other in self.units:  # a hidden unit defined in the file this one edited
                if other.hidden and other.hazards.real_file == unit.hazards.real_file:
                    self.record(
                        "FACT",
                        f"unit {other.id}: {other.hazards.function} is defined "
                        f"in {other.hazards.real_file} (seen while doing unit {unit.id})",
                    )
        elif claim_id is not None:
            self.release(claim_id)
