"""The simulated harness: a scripted worker (no LLM) that follows the cooperation loop through
the same hub operations and real git, replaying a task's known solution one unit at a time.

It exists for tests, demos and scale runs on machines without a model. Each session it takes
the newest main, picks an unclaimed unit that is not yet merged, claims it (yielding to an
earlier claim on the same unit, by DM), "thinks", applies the unit, verifies, opens and merges a
pull request (merging main in on a conflict), and records a PATCH_SUMMARY.
"""

from __future__ import annotations

import py_compile
import random
import subprocess
import time
from pathlib import Path
from typing import Any

from swarm.errors import InvalidInput
from swarm.harness import SessionContext, SessionResult
from swarm.tasks.units import Unit, UnitAlreadyApplied, apply_unit, parse_units
from swarm.tools.client import HubClient, HubError

NO_WORK_LEFT = "no work left"
MAX_MERGE_ATTEMPTS = 4


def unit_topic(unit: Unit) -> str:
    return f"topic:unit-{unit.id}".lower()


def is_applied(unit: Unit, root: Path) -> bool:
    for edit in unit.edits:
        path = root / edit.path
        if not path.is_file():
            return False
        text = path.read_text(encoding="utf-8")
        if edit.old in text or edit.new not in text:
            return False
    return True


class SimHarness:
    name = "sim"

    def __init__(
        self,
        *,
        solution: str | Path | None = None,
        task_name: str = "this task",
        think: float = 1.0,
        fact_rate: float = 0.2,
        wait_for_work: float = 30.0,
        seed: int | None = None,
    ) -> None:
        if solution is None or not Path(solution).is_file():
            raise InvalidInput(
                f"the simulated harness replays a task's known solution, and {task_name} ships "
                "none (no `solution` in its task.toml). Use a task with solution units, or "
                "--harness mini with --model"
            )
        self.units = parse_units(Path(solution).read_text(encoding="utf-8"), str(solution))
        self.think = think
        self.fact_rate = fact_rate
        self.wait_for_work = wait_for_work
        self.seed = seed

    def run_session(self, ctx: SessionContext) -> SessionResult:
        return _Session(self, ctx).run()


class _Session:
    def __init__(self, harness: SimHarness, ctx: SessionContext) -> None:
        self.h = harness
        self.ctx = ctx
        self.steps = 0
        self.client = HubClient(ctx.env["SWARM_HUB_URL"], ctx.env["SWARM_TOKEN"])
        seed = harness.seed if harness.seed is not None else hash((ctx.worker, time.time()))
        self.rng = random.Random(f"{seed}-{ctx.worker}-{ctx.number}")

    # -- small tools ------------------------------------------------------------------------
    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.steps += 1
        answer = self.client.call(method, path, **kwargs)
        self.ctx.on_step(f"{method} {path}")
        return answer

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        self.steps += 1
        done = subprocess.run(
            ["git", *args], cwd=self.ctx.workdir, env=self.ctx.env,
            capture_output=True, text=True, check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()[-400:]}")
        return done

    def record(self, kind: str, body: str, **fields: Any) -> dict[str, Any]:
        return self.call("POST", "/v1/entries", json={"type": kind, "body": body, **fields})

    def sleep(self, seconds: float) -> bool:
        """Think; False when the worker was told to stop meanwhile."""
        return not self.ctx.stop.wait(max(0.0, seconds))

    def result(self, ended: str, detail: str) -> SessionResult:
        self.client.close()
        return SessionResult(ended, steps=self.steps, detail=detail)  # type: ignore[arg-type]

    # -- the loop ---------------------------------------------------------------------------
    def refresh(self) -> None:
        self.git("fetch", "-q", "origin")
        self.git("checkout", "-q", "-B", f"{self.ctx.worker}/work", "origin/main")
        self.git("reset", "-q", "--hard", "origin/main")

    def run(self) -> SessionResult:
        self.ctx.channel_digest()  # the iteration starts by reading the channel
        waited = 0.0
        while not self.ctx.stop.is_set():
            self.refresh()
            open_units = [u for u in self.h.units if not is_applied(u, self.ctx.workdir)]
            if not open_units:
                return self.result("stopped", f"{NO_WORK_LEFT}: every unit is merged on main")
            claimed = self.claimed_topics()
            free = [u for u in open_units if unit_topic(u) not in claimed]
            if not free:
                if waited >= self.h.wait_for_work:
                    return self.result("submitted", "every open unit is claimed by a peer")
                pause = min(2.0, 0.2 + self.h.think)
                if not self.sleep(pause):
                    break
                waited += pause
                continue
            unit = self.rng.choice(free)
            claim_id = self.claim(unit)
            if claim_id is None:
                continue  # a peer was first: pick again
            return self.work(unit, claim_id)
        return self.result("stopped", "told to stop")

    def claimed_topics(self) -> set[str]:
        claims = self.call("GET", "/v1/claims")["result"]["claims"]
        return {s for c in claims if c["owner"] != self.ctx.worker for s in c["scope"]}

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
                "POST", "/v1/dm",
                json={"to": first["owner"], "body": f"unit {unit.id} is yours (your claim "
                      f"#{first['id']} came first); I released my claim #{mine}."},
            )
            return None
        return mine

    def work(self, unit: Unit, claim_id: int) -> SessionResult:
        if not self.sleep(self.h.think * self.rng.uniform(0.5, 1.5)):
            self.call("POST", f"/v1/claims/{claim_id}/release")
            return self.result("stopped", "told to stop")
        try:
            changed = apply_unit(unit, self.ctx.workdir)
        except UnitAlreadyApplied:
            self.record("OBSERVED", f"unit {unit.id} is already on main; nothing to do",
                        refs=[claim_id])
            self.call("POST", f"/v1/claims/{claim_id}/release")
            return self.result("submitted", f"unit {unit.id} was already merged")
        problem = self.verify(changed)
        if problem:
            self.record("FAIL", f"unit {unit.id}: verification failed: {problem}", refs=[claim_id])
            return self.result("error", f"unit {unit.id} did not verify")
        branch = f"{self.ctx.worker}/unit-{unit.id}"
        self.git("add", "--", *changed)
        self.git("commit", "-q", "-m", f"unit {unit.id}: {unit.title}")
        self.git("push", "-q", "-f", "origin", f"HEAD:refs/heads/{branch}")
        pr = self.call("POST", "/v1/prs", json={
            "branch": branch, "title": f"unit {unit.id}: {unit.title}",
            "body": f"Implements {unit.title} in {', '.join(changed)}. Verified: py_compile.",
        })["result"]["pr"]
        merged = self.merge(int(pr["number"]), branch, claim_id, unit)
        if merged is None:
            return self.result("error", f"unit {unit.id}: PR #{pr['number']} could not merge")
        self.record(
            "PATCH_SUMMARY",
            f"unit {unit.id} ({unit.title}): applied the known solution to {', '.join(changed)}; "
            f"py_compile passed; merged PR #{pr['number']} as {str(merged['merge_commit'])[:10]}.",
            refs=[claim_id],
        )
        if self.rng.random() < self.h.fact_rate:
            self.record("FACT", f"{unit.title} is implemented in {', '.join(changed)} on main "
                        f"(PR #{pr['number']}).", scope=list(unit.scope))
        return self.result("submitted", f"merged unit {unit.id} as PR #{pr['number']}")

    def verify(self, changed: list[str]) -> str | None:
        for path in changed:
            if path.endswith(".py"):
                try:
                    py_compile.compile(str(self.ctx.workdir / path), doraise=True)
                except py_compile.PyCompileError as exc:
                    return str(exc)
        return None

    def merge(self, number: int, branch: str, claim_id: int, unit: Unit) -> dict[str, Any] | None:
        for _attempt in range(MAX_MERGE_ATTEMPTS):
            try:
                return dict(self.call("POST", f"/v1/prs/{number}/merge")["result"]["pr"])
            except HubError as exc:
                if exc.status != 409 or not exc.payload.get("files"):
                    raise
                files = ", ".join(exc.payload["files"])
                self.record("OBSERVED", f"PR #{number} conflicts with main in {files}; "
                            "merging main in", refs=[claim_id])
            self.git("fetch", "-q", "origin")
            if self.git("merge", "-q", "--no-edit", "origin/main", check=False).returncode != 0:
                self.git("merge", "--abort", check=False)
                self.record("FAIL", f"unit {unit.id}: merging main into {branch} conflicts in "
                            f"{files}; leaving it for a fresh attempt", refs=[claim_id])
                return None
            self.git("push", "-q", "-f", "origin", f"HEAD:refs/heads/{branch}")
        return None
