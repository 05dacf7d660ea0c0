"""One-shot, idempotent set-up of a compose run (the `bootstrap` service): checks .env's secrets;
sets up Gitea and Mattermost (or, embedded, the hub's own repository); writes what workers get
of the task (goal; for sim, the solution) for the hub, and where the evaluator reads main.

Every failure is one line naming what to fix; compose restarts the service until it succeeds."""

from __future__ import annotations

import json
import os
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import httpx

from swarm.config import PLACEHOLDER_SECRETS
from swarm.db import Database
from swarm.errors import SwarmError
from swarm.messages.mattermost import MattermostMessages
from swarm.registry import Worker
from swarm.tasks.model import load_task
from swarm.tasks.published import publish_task
from swarm.workspace.gitea import GiteaWorkspace
from swarm.workspace.gitea_client import GiteaClient
from swarm.workspace.repo import init_repo

SECRETS = (
    "POSTGRES_PASSWORD",
    "GITEA_ADMIN_PASSWORD",
    "MATTERMOST_ADMIN_PASSWORD",
    "SWARM_JOIN_TOKEN",
    "SWARM_OPERATOR_TOKEN",
)


def env(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if not value:
        sys.exit(f"bootstrap: {name} is not set")
    return value


def saved_token(
    secrets: Path, name: str, valid: Callable[[str], bool], make: Callable[[], str]
) -> str:
    """Reuse the token saved by an earlier run while it still works; else make and save one."""
    path = secrets / f"{name}.token"
    if path.exists() and valid(path.read_text().strip()):
        return path.read_text().strip()
    token = str(make())
    path.write_text(token)
    path.chmod(0o640)
    return token


def check_secrets() -> None:
    """Refuse placeholder or short secrets before anything is created with them."""
    for name in SECRETS:
        value = os.environ.get(name)
        if value is not None and (value.lower() in PLACEHOLDER_SECRETS or len(value) < 12):
            sys.exit(
                f"bootstrap: {name} in .env is a placeholder or shorter than 12 characters; set "
                "a real secret (python3 -c 'import secrets; print(secrets.token_urlsafe(24))') "
                "and run `docker compose up -d` again"
            )


def gitea(secrets: Path, workers: int) -> None:
    url, user, password = (
        env("SWARM_GITEA_URL"),
        env("GITEA_ADMIN_USER"),
        env("GITEA_ADMIN_PASSWORD"),
    )
    owner, repo = env("SWARM_GITEA_OWNER", "swarm"), env("SWARM_GITEA_REPO", "task")

    def valid(token: str) -> bool:
        return httpx.get(
            f"{url}/api/v1/user", headers={"Authorization": f"token {token}"}
        ).is_success

    probe = GiteaClient(url, "unused")
    token = saved_token(
        secrets,
        "gitea",
        valid,
        lambda: probe.create_token(user, password, f"swarm-{time.time_ns()}"),
    )
    approvals = int(env("SWARM_REQUIRED_APPROVALS", "0"))
    workspace = GiteaWorkspace(url, token, owner, repo, required_approvals=approvals)
    # Org, repository, main seeded with the task's starting files (pushed with the token), then
    # branch protection: nobody pushes to main from now on.
    workspace.prepare(Path(env("SWARM_TASK_DIR")) / "start")
    for n in range(1, workers + 1):
        workspace.ensure_worker(f"w{n}")
    # The evaluator reads main with a read-only account, and gets nothing else from here.
    evaluator = Path(env("SWARM_EVALUATOR_DIR", "/evaluator"))
    if evaluator.is_dir():
        (evaluator / "repo.url").write_text(workspace.reader_url())
    print(f"bootstrap: Gitea ready: {owner}/{repo}, {workers} worker accounts")


def embedded_workspace(run_dir: Path) -> None:
    """The hub's own bare repository with main = the task's starting files (kept if it exists)."""
    repo = run_dir / "workspace.git"
    made = init_repo(repo, Path(env("SWARM_TASK_DIR")) / "start")
    evaluator = Path(env("SWARM_EVALUATOR_DIR", "/evaluator"))
    if evaluator.is_dir():
        (evaluator / "repo.url").write_text(str(repo))
    print(f"bootstrap: embedded workspace {'created' if made else 'kept'}: {repo}")


def publish(run_dir: Path, workers: int) -> None:
    task = load_task(env("SWARM_TASK_DIR"))
    harness = env("SWARM_HARNESS", "sim")
    if harness == "sim" and task.solution_path is None:
        sys.exit(
            f"bootstrap: SWARM_HARNESS=sim replays a task's known solution, and {task.name} "
            "ships none; set SWARM_TASK_DIR to a task with solution units, or another harness"
        )
    if harness == "sim" and not task.solution_path.is_file():  # type: ignore[union-attr]
        sys.exit(
            f"bootstrap: {task.name} is not prepared ({task.solution_path} is missing): run "
            f"`swarm task prepare` on SWARM_TASK_DIR first"
        )
    publish_task(task, run_dir, harness=harness, team_size=workers)
    describe_run(run_dir, task.name, harness, workers)
    print(f"bootstrap: task {task.name} published to the hub ({harness}, {workers} workers)")


def mattermost(secrets: Path, workers: int) -> None:
    url, user = env("SWARM_MATTERMOST_URL"), env("MATTERMOST_ADMIN_USER")
    password = env("MATTERMOST_ADMIN_PASSWORD")
    team = env("SWARM_MATTERMOST_TEAM", "swarm")
    api = httpx.Client(base_url=f"{url}/api/v4", timeout=30)
    login = api.post("/users/login", json={"login_id": user, "password": password})
    if login.status_code == 401:  # first start: the first account becomes the system admin
        email = f"{user}@swarm.invalid"
        api.post(
            "/users", json={"username": user, "password": password, "email": email}
        ).raise_for_status()
        login = api.post("/users/login", json={"login_id": user, "password": password})
    login.raise_for_status()
    session = {"Authorization": f"Bearer {login.headers['Token']}"}
    admin_id = login.json()["id"]

    def valid(token: str) -> bool:
        return api.get("/users/me", headers={"Authorization": f"Bearer {token}"}).is_success

    def make() -> str:
        made = api.post(
            f"/users/{admin_id}/tokens", json={"description": "swarm hub"}, headers=session
        )
        made.raise_for_status()
        return str(made.json()["token"])

    token = saved_token(secrets, "mattermost", valid, make)
    admin = {"Authorization": f"Bearer {token}"}
    if api.get(f"/teams/name/{team}", headers=admin).status_code == 404:
        body = {"name": team, "display_name": team, "type": "I"}
        api.post("/teams", json=body, headers=admin).raise_for_status()
    db = Database(env("SWARM_DATABASE_URL"))
    db.create_schema()  # includes the Mattermost adapter's tables (imported above)
    messages = MattermostMessages(url, token, db, team=team)
    messages.channel_id("tasks")
    for n in range(1, workers + 1):
        messages.account(Worker(n, f"w{n}"))  # bot, token and memberships, stored for the hub
    print(f"bootstrap: Mattermost ready: team {team}, channel tasks, {workers} worker bots")


def describe_run(run_dir: Path, task: str, harness: str, workers: int) -> None:
    """`run.toml` for `swarm report` and the dashboard, as `swarm run` writes it; a second
    bootstrap (every `up`) keeps the run's start time."""
    path = run_dir / "run.toml"
    old = tomllib.loads(path.read_text()) if path.is_file() else {}
    values = {
        "task_name": task,
        "workers": workers,
        "harness": harness,
        "model": os.environ.get("SWARM_MODEL", ""),
        "database_url": os.environ.get("SWARM_DATABASE_URL", ""),
        "started": old.get("started", time.time()),
    }
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))


def workers_wanted() -> int:
    raw = env("SWARM_WORKERS", "4")
    if not raw.isdigit() or not 1 <= int(raw) <= 1024:
        sys.exit(f"bootstrap: SWARM_WORKERS={raw!r} in .env must be a whole number, 1 to 1024")
    return int(raw)


def main() -> None:
    check_secrets()
    workers = workers_wanted()
    secrets = Path(env("SWARM_SECRETS_DIR", "/secrets"))
    secrets.mkdir(parents=True, exist_ok=True)
    run_dir = Path(env("SWARM_RUN_DIR", "/run/swarm"))
    server = "Gitea"
    try:
        if os.environ.get("SWARM_WORKSPACE", "local") == "gitea":
            gitea(secrets, workers)
        else:
            embedded_workspace(run_dir)
        server = "Mattermost"
        if os.environ.get("SWARM_MESSAGES", "local") == "mattermost":
            mattermost(secrets, workers)
    except httpx.TransportError as exc:
        url = env("SWARM_GITEA_URL" if server == "Gitea" else "SWARM_MATTERMOST_URL")
        sys.exit(f"bootstrap: cannot reach {server} at {url} ({exc}); check that it is up and "
                 "the URL in the compose file; retrying")  # fmt: skip
    except SwarmError as exc:  # the adapters' own errors (unreachable, refused) say what failed
        sys.exit(f"bootstrap: {server}: {exc.message}; check that it is up and the admin user "
                 "and password in .env; retrying")  # fmt: skip
    except httpx.HTTPStatusError as exc:
        sys.exit(f"bootstrap: {server} refused {exc.request.method} {exc.request.url.path}: "
                 f"{exc.response.status_code} {exc.response.text[:200]}; check the admin user "
                 "and password in .env")  # fmt: skip
    publish(run_dir, workers)


if __name__ == "__main__":
    main()
