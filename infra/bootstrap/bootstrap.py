"""One-shot, idempotent set-up of Gitea and Mattermost for a run (the compose `bootstrap`)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from swarm.db import Database
from swarm.messages.mattermost import MattermostMessages
from swarm.registry import Worker
from swarm.workspace.gitea import GiteaWorkspace
from swarm.workspace.gitea_client import GiteaClient


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
    print(f"bootstrap: Gitea ready: {owner}/{repo}, {workers} worker accounts")


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


def main() -> None:
    secrets = Path(env("SWARM_SECRETS_DIR", "/secrets"))
    secrets.mkdir(parents=True, exist_ok=True)
    workers = int(env("SWARM_WORKERS", "4"))
    gitea(secrets, workers)
    mattermost(secrets, workers)


if __name__ == "__main__":
    main()
