"""End to end against the two servers: `swarm run` with simulated workers whose workspace is
Gitea and whose messages are Mattermost (stateful stand-ins on loopback, every API exchange
checked against the official specs), bootstrapped like the compose deployment does."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from contract.spec import MATTERMOST_DRIFT, SpecCheck, gitea_spec, mattermost_spec
from standins.git import BareRepo
from standins.gitea import GiteaStandin
from standins.mattermost import MattermostStandin
from standins.serve import Validated, loopback

from swarm.tasks.demo import make_demo_task
from swarm.tasks.units import parse_units
from swarm.tools.client import HubClient
from swarm.worker.run import Run, RunPlan

ROOT = Path(__file__).resolve().parents[1]
GITEA_ADMIN_TOKEN = "gitea-admin-token-0123456789"
GITEA_ADMIN_PASSWORD = "gitea-admin-password-0123"
MM_ADMIN_TOKEN = "mm-admin-token-0123456789"
WORKERS = 4


def load_bootstrap() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "infra_bootstrap", ROOT / "infra" / "bootstrap" / "bootstrap.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Servers:
    gitea: GiteaStandin
    gitea_url: str
    gitea_check: Validated
    mattermost: MattermostStandin
    mattermost_url: str
    mattermost_check: Validated
    tasks_channel: str


@pytest.fixture
def servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Servers]:
    gitea = GiteaStandin(
        tmp_path / "gitea", admin_token=GITEA_ADMIN_TOKEN, admin_password=GITEA_ADMIN_PASSWORD
    )
    mattermost = MattermostStandin(admin_token=MM_ADMIN_TOKEN)
    gitea_app = Validated(gitea.app, SpecCheck(gitea_spec()))
    mm_app = Validated(mattermost.app, SpecCheck(mattermost_spec(), MATTERMOST_DRIFT))
    with loopback(gitea_app) as gitea_url, loopback(mm_app) as mm_url:
        # Gitea as the compose `bootstrap` sets it up: an admin token made with the admin's
        # password, the organisation, the repository seeded with the task's starting files,
        # branch protection on main, the worker accounts.
        task = make_demo_task(tmp_path / "task")
        secrets = tmp_path / "secrets"
        secrets.mkdir()
        for name, value in {
            "SWARM_GITEA_URL": gitea_url,
            "GITEA_ADMIN_USER": "admin",
            "GITEA_ADMIN_PASSWORD": GITEA_ADMIN_PASSWORD,
            "SWARM_GITEA_OWNER": "swarm",
            "SWARM_GITEA_REPO": "task",
            "SWARM_TASK_DIR": str(task.root),
        }.items():
            monkeypatch.setenv(name, value)
        load_bootstrap().gitea(secrets, WORKERS)
        # Mattermost: the team and its `tasks` channel, made by the admin over REST.
        admin = {"Authorization": f"Bearer {MM_ADMIN_TOKEN}"}
        with httpx.Client(base_url=f"{mm_url}/api/v4", headers=admin) as api:
            team = api.post("/teams", json={"name": "swarm", "display_name": "swarm", "type": "I"})
            team.raise_for_status()
            channel = api.post(
                "/channels",
                json={"team_id": team.json()["id"], "name": "tasks", "display_name": "tasks",
                      "type": "O"},
            )  # fmt: skip
            channel.raise_for_status()
        # The run (hub, workers) reads these from its environment.
        for name, value in {
            "SWARM_WORKSPACE": "gitea",
            "SWARM_MESSAGES": "mattermost",
            "SWARM_GITEA_TOKEN": (secrets / "gitea.token").read_text().strip(),
            "SWARM_MATTERMOST_URL": mm_url,
            "SWARM_MATTERMOST_TOKEN": MM_ADMIN_TOKEN,
            "SWARM_MATTERMOST_TEAM": "swarm",
        }.items():
            monkeypatch.setenv(name, value)
        yield Servers(gitea, gitea_url, gitea_app, mattermost, mm_url, mm_app, channel.json()["id"])


def hub_db(run_dir: Path, sql: str, *args: Any, file: str = "hub.db") -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{run_dir / file}?mode=ro", uri=True, timeout=30) as conn:
        return conn.execute(sql, args).fetchall()


def merges_per_unit(repo: BareRepo, units: list[str]) -> dict[str, int]:
    """How many merges on main's first-parent line bring each unit's commit."""
    counts = dict.fromkeys(units, 0)
    for line in repo.git("log", "--first-parent", "--merges", "--format=%H %P", "main").split("\n"):
        if not line:
            continue
        _merge, first, second = line.split()
        for subject in repo.git("log", "--format=%s", f"{first}..{second}").splitlines():
            unit = subject[5:].split(":", 1)[0] if subject.startswith("unit ") else ""
            if unit in counts:
                counts[unit] += 1
    return counts


@pytest.mark.slow
def test_simulated_run_on_gitea_and_mattermost(servers: Servers, tmp_path: Path) -> None:
    started = time.monotonic()
    task = make_demo_task(tmp_path / "task")
    assert task.solution_path is not None
    units = [u.id for u in parse_units(task.solution_path.read_text(), "units")]
    plan = RunPlan(
        task=task, run_dir=tmp_path / "run", workers=WORKERS, harness="sim", think=0.2,
        budget_seconds=75, eval_every=600,
        # One worker per process: the runtime's per-process seed clone is keyed by the clone URL,
        # which on Gitea carries each worker's own credentials (see WorkerRuntime.seed).
        processes=WORKERS,
    )  # fmt: skip
    run = Run(plan)
    run.start()
    reason: str | None = None
    try:
        assert run.hub is not None
        # A person posts in the tasks channel (the admin, through Mattermost's own API).
        person = httpx.post(
            f"{servers.mattermost_url}/api/v4/posts",
            json={"channel_id": servers.tasks_channel, "message": "please keep PRs small"},
            headers={"Authorization": f"Bearer {MM_ADMIN_TOKEN}"},
        )
        person.raise_for_status()
        posted_at = person.json()["create_at"]
        # An extra worker (no harness) claims every module: each claim a simulated worker makes
        # overlaps it, so the hub tells it by DM (through Mattermost) while the run goes on.
        with HubClient(run.hub.url, run.hub.operator_token) as joiner:
            me = joiner.register()
        observer = HubClient(run.hub.url, me["token"])
        claim = observer.call(
            "POST", "/v1/entries",
            json={"type": "CLAIM", "body": "watching textkit", "scope": ["textkit/*"]},
        )["result"]["entry"]["id"]  # fmt: skip
        while reason is None:
            time.sleep(0.5)
            reason = run.poll()
        # While the hub still serves: the observer reviews a merged PR, reads its DMs, tries
        # to push to main with its own Gitea credentials, and releases its claim.
        first = min(n for n, p in servers.gitea.pulls["swarm/task"].items() if p.merged)
        answers = [
            observer.call("POST", f"/v1/prs/{first}/reviews",
                          json={"verdict": "comment", "body": "looks fine"}),
            observer.call("GET", "/v1/whoami"),
            observer.call("GET", "/v1/workspace"),
            observer.call("POST", f"/v1/claims/{claim}/release"),
        ]  # fmt: skip
        observer.close()
        # DMs are handed out once, on the first answer after they arrive: gather them all.
        delivered = [m for a in answers for m in (a.get("delivery") or {}).get("messages", [])]
        clone_url = answers[2]["result"]["clone_url"]
    finally:
        outcome = run.stop(reason or "test ended", grace=20)
    assert outcome.stopped_because == "every worker finished"
    run_dir = plan.run_dir
    names = {n for (n,) in hub_db(run_dir, "SELECT name FROM workers")} - {me["name"]}
    assert len(names) == WORKERS

    # The evaluator cloned main from Gitea (with a read-only account) and every test passes.
    final = outcome.final
    assert final is not None and final.reason is None, final
    assert final.total > 0 and final.passed == final.total
    repo = servers.gitea.repo("swarm", "task")
    assert final.commit == repo.head("main")

    # Every unit merged exactly once on Gitea's main, through PRs the workers opened and merged.
    assert merges_per_unit(repo, units) == dict.fromkeys(units, 1)
    merged = [p for p in servers.gitea.pulls["swarm/task"].values() if p.merged]
    assert len(merged) == len(units)
    assert {p.poster for p in merged} <= names and all(p.merged_by == p.poster for p in merged)
    assert all(p.head.startswith(f"{p.poster}/unit-") for p in merged)
    # Pushes came over git's smart HTTP, each as the worker's own Gitea user.
    pushers = {user for user, _repo, status in servers.gitea.pushes if status == 200}
    assert pushers <= names | {"admin"} and len(pushers & names) >= 2, pushers

    # A review through the hub is authored in Gitea by the reviewing worker's user.
    reviews = servers.gitea.pulls["swarm/task"][first].reviews
    assert [r["user"]["login"] for r in reviews] == [me["name"]]

    # Main is protected on Gitea: a worker's own credentials cannot push to it.
    main = repo.head("main")
    direct = repo.git("commit-tree", f"{main}^{{tree}}", "-p", str(main), "-m", "direct").strip()
    refused = subprocess.run(
        ["git", "push", clone_url, f"{direct}:refs/heads/main"],
        cwd=repo.path, capture_output=True, text=True,
    )  # fmt: skip
    assert refused.returncode != 0 and "protected branch main" in refused.stderr
    assert repo.head("main") == main

    # Claim overlaps reached the observer as DMs from the hub, in Mattermost direct channels.
    overlaps = [m for m in delivered if m["author"] == "hub" and "overlaps" in m["body"]]
    assert len(overlaps) >= len(units), delivered
    mm = servers.mattermost
    bots = {u["id"]: u["username"] for u in mm.users.values() if u.get("is_bot")}
    assert names | {me["name"]} <= set(bots.values())
    dm_channels = {c["id"] for c in mm.channels.values() if c["type"] == "D"}
    in_direct = [p for p in mm.posts.values() if p["channel_id"] in dm_channels]
    assert len(in_direct) >= len(overlaps)
    observer_id = next(i for i, n in bots.items() if n == me["name"])
    assert all(observer_id in mm.members[p["channel_id"]] for p in in_direct
               if "overlaps your claim" in p["message"])  # fmt: skip
    # Worker-to-worker DMs (a unit claimed twice) are posted by the sender's own bot.
    for post in in_direct:
        if post["message"].startswith("unit "):
            assert post["user_id"] in bots

    # The person's post reached the workers' next digests: their channel cursors passed it.
    cursors = hub_db(
        run_dir,
        "SELECT worker, at FROM mattermost_cursors WHERE stream = 'channel'",
        file="hub-mattermost.db",  # the adapter's own file beside hub.db (SQLite)
    )
    readers = {w for w, at in cursors if at >= posted_at and w in names}
    assert readers, cursors

    # Every exchange with both servers matched the official specs.
    assert servers.gitea_check.errors == [], servers.gitea_check.errors[:3]
    assert servers.mattermost_check.errors == [], servers.mattermost_check.errors[:3]
    assert servers.gitea_check.count > 50 and servers.mattermost_check.count > 50
    print(json.dumps({"seconds": round(time.monotonic() - started, 1),
                      "gitea_calls": servers.gitea_check.count,
                      "mattermost_calls": servers.mattermost_check.count}))  # fmt: skip
    assert time.monotonic() - started < 90
