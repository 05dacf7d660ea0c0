"""The workspace on a self-hosted Gitea: each worker is a Gitea user, PRs and reviews are real."""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import subprocess
import tempfile
import threading
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from swarm.config import Settings
from swarm.db import Database
from swarm.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    MergeConflict,
    SwarmError,
    Unavailable,
)
from swarm.registry import Worker
from swarm.workspace.gitea_client import GiteaClient, status_of
from swarm.workspace.ports import (
    MAIN,
    OPERATOR,
    PRState,
    PullRequest,
    PullRequestDetail,
    Review,
    Verdict,
    branch_owner,
)

EVENTS: dict[Verdict, str] = {
    "approve": "APPROVED",
    "request_changes": "REQUEST_CHANGES",
    "comment": "COMMENT",
}
VERDICTS = {v: k for k, v in EVENTS.items()}
_merge_locks: dict[str, threading.Lock] = {}
_merge_locks_guard = threading.Lock()


def _lock_for(key: str) -> threading.Lock:
    """One lock per repository, shared by every adapter in this process."""
    with _merge_locks_guard:
        return _merge_locks.setdefault(key, threading.Lock())


def _time(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


class _Retry(Exception):
    """A merge Gitea refused for a reason that may pass (stale `mergeable`, main moved)."""


class GiteaWorkspace:
    """Implements `swarm.workspace.ports.Workspace` over Gitea's REST API with one admin token."""

    def __init__(
        self,
        base_url: str,
        token: str,
        owner: str,
        repo: str,
        *,
        transport: httpx.BaseTransport | None = None,
        password_secret: str | None = None,
        clone_base_url: str | None = None,
        required_approvals: int = 0,
        rate: float = 50.0,
        merge_attempts: int = 6,
        merge_wait: float = 0.2,
    ) -> None:
        self.client = GiteaClient(base_url, token, transport=transport, rate=rate)
        self.owner = owner
        self.repo = repo
        self.path = f"/repos/{owner}/{repo}"
        # Worker passwords are derived, so every hub replica computes the same ones.
        self._secret = (password_secret or token).encode()
        self._token = token
        self.clone_base_url = (clone_base_url or base_url).rstrip("/")
        self.required_approvals = required_approvals
        self.merge_attempts = merge_attempts
        self.merge_wait = merge_wait
        self._known_users: set[str] = set()
        self._merge_lock = _lock_for(f"{base_url}{self.path}")

    # --- accounts ---

    def password(self, name: str) -> str:
        """The worker's Gitea password (HMAC of its name with the adapter's secret)."""
        return hmac.new(self._secret, name.encode(), hashlib.sha256).hexdigest()[:32]

    def ensure_worker(self, worker: Worker | str) -> str:
        """Create the worker's Gitea user with write access to the repository (idempotent)."""
        name = worker.name if isinstance(worker, Worker) else worker
        if name not in self._known_users:
            self.client.ensure_user(name, self.password(name))
            self.client.add_collaborator(self.owner, self.repo, name)
            self._known_users.add(name)
        return name

    def setup(self) -> None:
        """Organisation, repository and branch protection on main (idempotent)."""
        self.client.ensure_org(self.owner)
        self.client.ensure_repo(self.owner, self.repo)
        self.client.protect_main(self.owner, self.repo, required_approvals=self.required_approvals)

    def prepare(self, start: Path, message: str = "Starting files of the task") -> bool:
        """Organisation, repository, main seeded with `start`'s files (when main does not exist
        yet), then branch protection (idempotent). True if main was seeded now."""
        self.client.ensure_org(self.owner)
        self.client.ensure_repo(self.owner, self.repo)
        seeded = False
        if not self.client.branch_exists(self.owner, self.repo, MAIN):
            self.seed(start, message)
            seeded = True
        self.setup()  # protection after the seed: nobody pushes to main from now on
        return seeded

    def seed(self, start: Path, message: str = "Starting files of the task") -> None:
        """Push `start`'s files as the first commit of main, as the token's owner (Gitea takes
        an access token as the basic-auth password). Must run before main is protected."""
        url = urlsplit(f"{self.clone_base_url}/{self.owner}/{self.repo}.git")
        netloc = f"swarm:{quote(self._token, safe='')}@{url.netloc}"
        remote = urlunsplit((url.scheme, netloc, url.path, "", ""))
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(start, tmp, dirs_exist_ok=True)
            for args in (
                ["init", "-q", "-b", MAIN],
                ["add", "-A"],
                ["-c", "user.name=swarm", "-c", "user.email=swarm@swarm.invalid",
                 "commit", "-q", "--allow-empty", "-m", message],
                ["push", "-q", remote, f"HEAD:refs/heads/{MAIN}"],
            ):  # fmt: skip
                done = subprocess.run(
                    ["git", *args], cwd=tmp, env=env, capture_output=True, text=True
                )
                if done.returncode != 0:
                    error = done.stderr.replace(self._token, "***").strip()[-500:]
                    raise Unavailable(f"seeding {self.owner}/{self.repo} failed: {error}")

    def reader_url(self, name: str = "swarm-evaluator") -> str:
        """A clone URL for a read-only account (the evaluator reads main, never pushes)."""
        if name not in self._known_users:
            self.client.ensure_user(name, self.password(name))
            self.client.add_collaborator(self.owner, self.repo, name, permission="read")
            self._known_users.add(name)
        return self._url_for(name)

    # --- the port ---

    def clone_url(self, worker: Worker) -> str:
        return self._url_for(self.ensure_worker(worker))

    def _url_for(self, name: str) -> str:
        url = urlsplit(f"{self.clone_base_url}/{self.owner}/{self.repo}.git")
        netloc = f"{quote(name)}:{self.password(name)}@{url.netloc}"
        return urlunsplit((url.scheme, netloc, url.path, "", ""))

    def main_head(self) -> str:
        return str(self.client.get(f"{self.path}/branches/{MAIN}")["commit"]["id"])

    def open_pr(self, author: Worker, branch: str, title: str, body: str) -> PullRequest:
        if not title.strip():
            raise InvalidInput("a pull request needs a title")
        if branch == MAIN:
            raise InvalidInput("open a pull request from your own branch, not from main")
        # Gitea lets any collaborator open a PR from any branch: the namespace rule is ours.
        if branch_owner(branch) != author.name:
            raise Forbidden(
                f"{branch} is not your branch: you open PRs only from yours ({author.name}/<topic>)"
            )
        name = self.ensure_worker(author)
        created = self.client.post(
            f"{self.path}/pulls",
            {"head": branch, "base": MAIN, "title": title, "body": body},
            sudo=name,
        )
        return self._pr(created)

    def list_prs(
        self, *, state: PRState | None = None, author: str | None = None, limit: int = 50
    ) -> list[PullRequest]:
        gitea_state = {"open": "open", "merged": "closed", "closed": "closed", None: "all"}[state]
        params: dict[str, Any] = {"state": gitea_state}
        if author:
            params["poster"] = author
        found: list[PullRequest] = []
        for item in self.client.paged(f"{self.path}/pulls", params):
            pr = self._pr(item)
            if state is None or pr.state == state:
                found.append(pr)
                if len(found) >= limit:
                    break
        return sorted(found, key=lambda p: (p.created_at, p.number), reverse=True)

    def get_pr(self, number: int) -> PullRequestDetail:
        raw = self.client.get(f"{self.path}/pulls/{number}")
        reviews = tuple(self._reviews(number))
        pr = self._pr(raw, reviews)
        files = tuple(f["filename"] for f in self.client.paged(f"{self.path}/pulls/{number}/files"))
        diff = self.client.send("GET", f"{self.path}/pulls/{number}.diff").text
        mergeable: bool | None = raw.get("mergeable") if pr.state == "open" else None
        conflicts = tuple(self._conflicts(raw, files)) if mergeable is False else ()
        return PullRequestDetail(pr, diff, files, reviews, mergeable, conflicts)

    def review(self, reviewer: Worker, number: int, verdict: Verdict, body: str) -> Review:
        if verdict not in EVENTS:
            raise InvalidInput(f"unknown verdict {verdict!r}: use {', '.join(EVENTS)}")
        name = self.ensure_worker(reviewer)
        try:
            raw = self.client.post(
                f"{self.path}/pulls/{number}/reviews",
                {"event": EVENTS[verdict], "body": body},
                sudo=name,
            )
        except InvalidInput as exc:
            if verdict == "approve" and status_of(exc) == 422:
                raise Forbidden(f"you cannot approve your own pull request #{number}") from exc
            raise
        return self._review(number, raw)

    def merge(self, worker: Worker, number: int) -> PullRequest:
        # The operator merges as the admin with `force_merge` (Gitea's admin override).
        name = None if worker == OPERATOR else self.ensure_worker(worker)
        with self._merge_lock:  # Gitea locks merges per PR only: serialize merges into main
            retrying = Retrying(
                retry=retry_if_exception(lambda e: isinstance(e, _Retry)),
                stop=stop_after_attempt(self.merge_attempts),
                wait=wait_exponential(multiplier=self.merge_wait, max=5),
                reraise=True,
            )
            try:
                for attempt in retrying:
                    with attempt:
                        self._merge_once(name, number)
            except _Retry as exc:
                raise Conflict(f"Gitea kept refusing to merge #{number}: {exc}") from exc
        return self._pr(self.client.get(f"{self.path}/pulls/{number}"))

    def _merge_once(self, name: str | None, number: int) -> None:
        raw = self.client.get(f"{self.path}/pulls/{number}")
        pr = self._pr(raw)
        if pr.state != "open":
            raise Conflict(f"pull request #{number} is {pr.state}; only an open one can merge")
        body: dict[str, Any] = {
            "do": "merge",
            "head_commit_id": pr.head,
            "merge_title_field": pr.title,
        }
        if name is None:
            body["force_merge"] = True
        response = self.client.send(
            "POST", f"{self.path}/pulls/{number}/merge", json=body, sudo=name, ok=(405, 409)
        )
        if response.is_success:
            return
        message = _message(response)
        if response.status_code == 409 or "out of date" in message:
            raise _Retry(message)  # main moved under a concurrent merge
        fresh = self.client.get(f"{self.path}/pulls/{number}")
        if fresh.get("merged"):
            return
        if fresh.get("mergeable") is False:
            files = self._conflicts(fresh, None)
            raise MergeConflict(
                f"#{number} conflicts with main in {', '.join(files) or 'some files'}: "
                "merge main into your branch, resolve, push, and merge again",
                files,
            )
        # Branch protection's refusals (Gitea's ErrDisallowedToMerge reasons): final, not retried.
        if any(w in message.lower() for w in ("approv", "review", "requested changes", "force")):
            raise Conflict(f"#{number} cannot merge yet: {message}")
        raise _Retry(message)  # `mergeable` may be stale while Gitea rechecks

    def close(self, worker: Worker, number: int) -> PullRequest:
        name = None if worker == OPERATOR else self.ensure_worker(worker)
        pr = self._pr(self.client.get(f"{self.path}/pulls/{number}"))
        if pr.state != "open":
            raise Conflict(f"pull request #{number} is already {pr.state}")
        # Gitea lets any collaborator close any PR: the author rule is ours.
        if name is not None and pr.author != name:
            raise Forbidden(
                f"PR #{number} is {pr.author}'s; only its author (or the operator) closes it"
            )
        raw = self.client.send(
            "PATCH", f"{self.path}/pulls/{number}", json={"state": "closed"}, sudo=name
        ).json()
        return self._pr(raw)

    # --- conversions ---

    def _reviews(self, number: int) -> list[Review]:
        raws = self.client.paged(f"{self.path}/pulls/{number}/reviews")
        return [
            self._review(number, r)
            for r in raws
            if r.get("state") in VERDICTS and not r.get("dismissed")
        ]

    def _review(self, number: int, raw: dict[str, Any]) -> Review:
        verdict = VERDICTS.get(raw.get("state", ""), "comment")
        created = _time(raw.get("submitted_at")) or 0.0
        author = (raw.get("user") or {}).get("login", "")
        return Review(int(raw["id"]), number, author, verdict, raw.get("body") or "", created)

    def _pr(self, raw: dict[str, Any], reviews: tuple[Review, ...] | None = None) -> PullRequest:
        state: PRState = "merged" if raw.get("merged") else raw.get("state", "open")
        if reviews is None:
            approvals = 0
        else:
            latest: dict[str, Verdict] = {}
            for r in sorted(reviews, key=lambda r: r.id):
                if r.verdict != "comment":
                    latest[r.author] = r.verdict
            approvals = sum(1 for v in latest.values() if v == "approve")
        head = raw.get("head") or {}
        return PullRequest(
            number=int(raw["number"]),
            title=raw.get("title") or "",
            body=raw.get("body") or "",
            author=(raw.get("user") or {}).get("login", ""),
            branch=head.get("ref", ""),
            state=state,
            created_at=_time(raw.get("created_at")) or 0.0,
            head=head.get("sha", ""),
            approvals=approvals,
            merged_at=_time(raw.get("merged_at")),
            merged_by=(raw.get("merged_by") or {}).get("login"),
            merge_commit=raw.get("merge_commit_sha"),
            closed_at=_time(raw.get("closed_at")) if state == "closed" else None,
        )

    def _conflicts(self, raw: dict[str, Any], files: tuple[str, ...] | None) -> list[str]:
        """Files changed both by the PR and on main since the merge base."""
        number = int(raw["number"])
        if files is None:
            files = tuple(
                f["filename"] for f in self.client.paged(f"{self.path}/pulls/{number}/files")
            )
        base = raw.get("merge_base") or (raw.get("base") or {}).get("sha")
        on_main: set[str] = set()
        if base:
            try:
                compare = self.client.get(f"{self.path}/compare/{base}...{MAIN}")
            except SwarmError:
                compare = {}
            for commit in compare.get("commits") or []:
                on_main.update(f.get("filename", "") for f in commit.get("files") or [])
        both = [f for f in files if f in on_main]
        return both or list(files)


class GiteaSettings(BaseSettings):
    """`SWARM_GITEA_*`: where Gitea is and the admin token the hub acts with."""

    model_config = SettingsConfigDict(env_prefix="SWARM_GITEA_", extra="ignore")

    url: str
    token: str = Field(min_length=12)
    owner: str = "swarm"
    repo: str = "task"
    clone_url: str | None = None  # the Gitea URL as workers see it, if it differs
    rate: float = 50.0  # requests per second from this hub replica


def from_settings(settings: Settings, db: Database | None = None) -> GiteaWorkspace:
    """The composition root's factory: `SWARM_WORKSPACE=gitea` plus `SWARM_GITEA_*`."""
    gitea = GiteaSettings()  # type: ignore[call-arg]
    return GiteaWorkspace(
        gitea.url,
        gitea.token,
        gitea.owner,
        gitea.repo,
        clone_base_url=gitea.clone_url,
        required_approvals=settings.required_approvals,
        rate=gitea.rate,
    )


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json().get("message") or response.text)
    except ValueError:
        return response.text


__all__ = ["GiteaSettings", "GiteaWorkspace", "from_settings"]
