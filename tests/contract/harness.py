"""Builds each adapter under test: embedded, server stand-ins (spec-validated), live servers."""

from __future__ import annotations

import base64
import functools
import itertools
import os
import secrets
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from standins.git import BareRepo
from standins.gitea import GiteaStandin
from standins.mattermost import MattermostStandin
from standins.serve import AppTransport

from contract.messages import MessagesHarness
from contract.spec import (
    MATTERMOST_DRIFT,
    SpecCheck,
    ValidatingTransport,
    gitea_spec,
    mattermost_spec,
)
from contract.workspace import Push, WorkspaceHarness
from swarm.db import Database
from swarm.registry import Registry, Worker
from swarm.workspace.ports import Workspace


def hub_database(tmp_path: Path) -> Database:
    import swarm.messages.mattermost  # noqa: F401  (registers its tables on the metadata)

    db = Database(f"sqlite:///{tmp_path / 'hub.db'}")
    db.create_schema()
    return db


def local_messages(tmp_path: Path) -> MessagesHarness:
    from swarm.messages.local import LocalMessages

    db = hub_database(tmp_path)
    registry = Registry(db)
    return MessagesHarness(LocalMessages(db), lambda: registry.register()[0], cleanup=[db.dispose])


def standin_messages(tmp_path: Path) -> MessagesHarness:
    from swarm.messages.mattermost import MattermostMessages

    standin = MattermostStandin()
    standin.ensure_team("swarm")
    inner = AppTransport(standin.app)
    check = SpecCheck(mattermost_spec(), MATTERMOST_DRIFT)
    transport = ValidatingTransport(inner, check)
    db = hub_database(tmp_path)
    registry = Registry(db)
    token = next(iter(standin.tokens))
    messages = MattermostMessages("http://mattermost.test", token, db, transport=transport)

    def person_posts(body: str) -> None:
        user_id, person_token = standin.add_person(f"alice{secrets.token_hex(2)}")
        channel = messages.channel_id("tasks")
        with httpx.Client(base_url="http://mattermost.test", transport=transport) as ui:
            admin = {"Authorization": f"Bearer {token}"}
            ui.post(f"/api/v4/channels/{channel}/members", json={"user_id": user_id}, headers=admin)
            answer = ui.post(
                "/api/v4/posts",
                json={"channel_id": channel, "message": body},
                headers={"Authorization": f"Bearer {person_token}"},
            )
            answer.raise_for_status()

    harness = MessagesHarness(messages, lambda: registry.register()[0], person_posts)
    harness.cleanup += [inner.close, db.dispose]
    harness.standin = standin  # type: ignore[attr-defined]
    harness.check = check  # type: ignore[attr-defined]
    return harness


def live_messages(tmp_path: Path) -> MessagesHarness:
    url, token = os.environ.get("SWARM_MATTERMOST_URL"), os.environ.get("SWARM_MATTERMOST_TOKEN")
    if not url or not token:
        pytest.skip("live Mattermost: set SWARM_MATTERMOST_URL and SWARM_MATTERMOST_TOKEN")
    from swarm.messages.mattermost import MattermostMessages

    team = f"swarm-test-{secrets.token_hex(4)}"  # a fresh team per test keeps tests apart
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as admin:
        admin.post("/api/v4/teams", json={"name": team, "display_name": team, "type": "I"})
    db = hub_database(tmp_path)
    messages = MattermostMessages(url, token, db, team=team)
    prefix = f"t{secrets.token_hex(3)}-w"
    counter = iter(range(1, 1_000_000))

    def new_worker() -> Worker:
        n = next(counter)
        return Worker(n, f"{prefix}{n}")

    return MessagesHarness(messages, new_worker, cleanup=[db.dispose])


MESSAGES_ADAPTERS = {
    "local": local_messages,
    "mattermost-standin": standin_messages,
    "mattermost-live": live_messages,
}


def seed_dir(tmp_path: Path) -> Path:
    seed = tmp_path / "seed"
    seed.mkdir(exist_ok=True)
    (seed / "README.md").write_text("seed\n")
    return seed


def plumbing_push(repo: BareRepo) -> Push:
    """Writes commits straight into a bare repository (what a worker's `git push` leaves)."""

    def push(_w: Worker, branch: str, files: dict[str, str | None], base: str | None) -> str:
        return repo.commit(branch, files, f"change {branch}", base)

    return push


def git_push(workspace: Workspace, tmp_path: Path) -> Push:
    """Pushes with the git CLI to the worker's clone URL (for live servers)."""

    def push(w: Worker, branch: str, files: dict[str, str | None], base: str | None) -> str:
        work = tmp_path / secrets.token_hex(4)
        run = functools.partial(subprocess.run, check=True, capture_output=True, cwd=work)
        subprocess.run(
            ["git", "clone", "-q", "-b", base or branch, workspace.clone_url(w), str(work)],
            check=True,
            capture_output=True,
        )
        for name, content in files.items():
            if content is None:
                (work / name).unlink()
            else:
                (work / name).write_text(content)
        run(["git", "add", "-A"])
        run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", branch])
        run(["git", "push", "-q", "origin", f"HEAD:refs/heads/{branch}"])
        return run(["git", "rev-parse", "HEAD"], text=True).stdout.strip()

    return push


def _numbered(prefix: str = "w") -> Callable[[], Worker]:
    counter = itertools.count(1)

    def new_worker() -> Worker:
        n = next(counter)
        return Worker(n, f"{prefix}{n}")

    return new_worker


def local_workspace(tmp_path: Path) -> WorkspaceHarness:
    try:
        from swarm.workspace.local import LocalWorkspace
    except ImportError as exc:  # being written by someone else
        pytest.skip(f"swarm.workspace.local does not import yet: {exc}")
    db = hub_database(tmp_path)
    registry = Registry(db)
    workspace = LocalWorkspace.create(tmp_path / "workspace.git", seed_dir(tmp_path), db)
    push = plumbing_push(BareRepo(tmp_path / "workspace.git"))
    harness = WorkspaceHarness(workspace, lambda: registry.register()[0], push)
    harness.cleanup += [workspace.close_queue, db.dispose]
    return harness


def standin_workspace(tmp_path: Path) -> WorkspaceHarness:
    from swarm.workspace.gitea import GiteaWorkspace

    standin = GiteaStandin(tmp_path / "gitea")
    inner = AppTransport(standin.app)
    check = SpecCheck(gitea_spec())
    transport = ValidatingTransport(inner, check)
    workspace = GiteaWorkspace(
        "http://gitea.test", standin.admin_token, "swarm", "task", transport=transport
    )
    workspace.setup()
    repo = standin.repo("swarm", "task")
    repo.commit("main", {"README.md": "seed\n"}, "seed")
    harness = WorkspaceHarness(workspace, _numbered(), plumbing_push(repo))
    harness.cleanup.append(inner.close)
    harness.standin = standin  # type: ignore[attr-defined]
    harness.check = check  # type: ignore[attr-defined]
    return harness


def live_workspace(tmp_path: Path) -> WorkspaceHarness:
    url, token = os.environ.get("SWARM_GITEA_URL"), os.environ.get("SWARM_GITEA_TOKEN")
    if not url or not token:
        pytest.skip("live Gitea: set SWARM_GITEA_URL and SWARM_GITEA_TOKEN (an admin token)")
    from swarm.workspace.gitea import GiteaWorkspace

    repo = f"contract-{secrets.token_hex(4)}"  # a fresh repository per test keeps tests apart
    workspace = GiteaWorkspace(url, token, "swarm-test", repo)
    workspace.client.ensure_org("swarm-test")
    workspace.client.ensure_repo("swarm-test", repo)
    seed = {"content": base64.b64encode(b"seed\n").decode(), "branch": "main", "message": "seed"}
    workspace.client.post(f"/repos/swarm-test/{repo}/contents/README.md", seed)
    workspace.setup()
    prefix = f"t{secrets.token_hex(3)}-w"
    return WorkspaceHarness(workspace, _numbered(prefix), git_push(workspace, tmp_path))


WORKSPACE_ADAPTERS = {
    "local": local_workspace,
    "gitea-standin": standin_workspace,
    "gitea-live": live_workspace,
}
