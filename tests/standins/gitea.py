"""A stateful in-memory stand-in for Gitea's REST API, backed by real bare git repositories.

Besides the REST API it serves git's smart HTTP at `/<owner>/<repo>.git` like Gitea does: basic
auth per user (password, or an access token as the password), read for collaborators, write for
collaborators with write permission, and a pre-receive hook that enforces branch protection
(`enable_push: false` refuses every push to the branch; merges go through the API).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import secrets
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from standins.git import BareRepo
from swarm.registry import Worker
from swarm.workspace.git_http import (
    GitLimits,
    _cgi_env,
    _CGIResponse,
    _feed,
    _read_headers,
    _reap,
)

# Installed in every repository: refuses updates of protected branches (names in the
# environment the stand-in gives http-backend), with Gitea's wording.
PRE_RECEIVE = r"""#!/bin/sh
status=0
while read -r old new ref; do
    for branch in $STANDIN_PROTECTED; do
        if [ "$ref" = "refs/heads/$branch" ]; then
            echo "Gitea: Not allowed to push to protected branch $branch" >&2
            status=1
        fi
    done
done
exit $status
"""

R = "/api/v1/repos/{owner}/{repo}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message


@dataclass
class PR:
    number: int
    title: str
    body: str
    poster: str
    head: str
    created_at: str
    state: str = "open"
    merged: bool = False
    merged_at: str | None = None
    merged_by: str | None = None
    merge_commit: str | None = None
    closed_at: str | None = None
    reviews: list[dict[str, Any]] = field(default_factory=list)


class GiteaStandin:
    """In-memory Gitea: users, one organisation's repositories, PRs, reviews, protection."""

    def __init__(
        self,
        root: Path,
        admin_token: str = "admin-token-0123456789",
        admin_password: str | None = None,
    ) -> None:
        self.root = root
        self.admin_token = admin_token
        self.users: dict[str, dict[str, Any]] = {
            "admin": {"id": 1, "login": "admin", "password": admin_password}
        }
        self.tokens: dict[str, str] = {admin_token: "admin"}
        self.orgs: set[str] = set()
        self.repos: dict[str, BareRepo] = {}
        self.collaborators: dict[str, set[str]] = {}
        self.readers: dict[str, set[str]] = {}  # collaborators with read permission only
        self.pushes: list[tuple[str, str, int]] = []  # (user, repo, status) of receive-packs
        self.protections: dict[str, list[dict[str, Any]]] = {}
        self.pulls: dict[str, dict[int, PR]] = {}
        self.ids = itertools.count(100)
        self.lock = threading.RLock()
        self.app = Starlette(routes=self._routes())

    # --- test helpers ---

    def repo(self, owner: str, repo: str) -> BareRepo:
        return self.repos[f"{owner}/{repo}"]

    # --- plumbing ---

    def _routes(self) -> list[Route]:
        table = [
            ("/api/v1/user", "GET", self.get_me),
            ("/api/v1/users/{username}", "GET", self.get_user),
            ("/api/v1/admin/users", "POST", self.create_user),
            ("/api/v1/users/{username}/tokens", "POST", self.create_token),
            ("/api/v1/orgs", "POST", self.create_org),
            ("/api/v1/orgs/{org}", "GET", self.get_org),
            ("/api/v1/orgs/{org}/repos", "POST", self.create_repo),
            (R, "GET", self.get_repo),
            (R + "/collaborators/{user}", "PUT", self.add_collaborator),
            (R + "/branch_protections", "GET", self.list_protections),
            (R + "/branch_protections", "POST", self.create_protection),
            (R + "/branches/{branch}", "GET", self.get_branch),
            (R + "/pulls", "GET", self.list_pulls),
            (R + "/pulls", "POST", self.create_pull),
            (R + "/pulls/{index:int}", "GET", self.get_pull),
            (R + "/pulls/{index:int}", "PATCH", self.edit_pull),
            (R + "/pulls/{index:int}.diff", "GET", self.pull_diff),
            (R + "/pulls/{index:int}/files", "GET", self.pull_files),
            (R + "/pulls/{index:int}/reviews", "GET", self.list_reviews),
            (R + "/pulls/{index:int}/reviews", "POST", self.create_review),
            (R + "/pulls/{index:int}/merge", "POST", self.merge_pull),
            (R + "/compare/{basehead}", "GET", self.compare),
        ]
        routes = [Route(path, self._wrap(handler), methods=[m]) for path, m, handler in table]
        git = Route("/{owner}/{repo}.git/{path:path}", self.serve_git, methods=["GET", "POST"])
        return [*routes, git]

    def _wrap(self, handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            body = await request.json() if await request.body() else None

            def call() -> Response:
                try:
                    user = self._auth(request)
                    with self.lock:
                        return handler(request, user, body)  # type: ignore[no-any-return]
                except ApiError as exc:
                    return JSONResponse({"message": exc.message, "url": ""}, exc.status)

            # Off the event loop: handlers run git, and git's smart HTTP streams meanwhile.
            return await run_in_threadpool(call)

        return endpoint

    def _auth(self, request: Request) -> str:
        header = request.headers.get("authorization", "")
        if header.startswith("Basic "):
            name, _, password = base64.b64decode(header[6:]).decode().partition(":")
            if password and password in self.tokens:  # an access token as the password
                return self.tokens[password]
            if not password or self.users.get(name, {}).get("password") != password:
                raise ApiError(401, "user or password is wrong")
            return name
        user = self.tokens.get(header.removeprefix("token ").strip())
        if user is None:
            raise ApiError(401, "token is required")
        sudo = request.headers.get("sudo")
        if sudo:
            if user != "admin":
                raise ApiError(403, "only admins may sudo")
            if sudo not in self.users:
                raise ApiError(404, f"sudo user {sudo} does not exist")
            return sudo
        return user

    def _user(self, name: str) -> dict[str, Any]:
        u = self.users[name]
        return {"id": u["id"], "login": name, "username": name, "email": f"{name}@swarm.invalid"}

    def _repo(self, request: Request) -> tuple[str, BareRepo]:
        key = f"{request.path_params['owner']}/{request.path_params['repo']}"
        if key not in self.repos:
            raise ApiError(404, "repository does not exist")
        return key, self.repos[key]

    def _pr(self, request: Request) -> tuple[str, BareRepo, PR]:
        key, repo = self._repo(request)
        pr = self.pulls[key].get(request.path_params["index"])
        if pr is None:
            raise ApiError(404, "pull request does not exist")
        return key, repo, pr

    # --- users, orgs, repos ---

    def get_me(self, _request: Request, user: str, _body: Any) -> Response:
        return JSONResponse(self._user(user))

    def get_user(self, request: Request, _user: str, _body: Any) -> Response:
        name = request.path_params["username"]
        if name not in self.users:
            raise ApiError(404, "user does not exist")
        return JSONResponse(self._user(name))

    def create_user(self, _request: Request, user: str, body: Any) -> Response:
        if user != "admin":
            raise ApiError(403, "admin only")
        if body["username"] in self.users:
            raise ApiError(422, "user already exists")
        self.users[body["username"]] = {"id": next(self.ids), "password": body.get("password")}
        return JSONResponse(self._user(body["username"]), 201)

    def create_token(self, request: Request, user: str, body: Any) -> Response:
        if user != request.path_params["username"]:
            raise ApiError(403, "basic auth of the user is required")
        token = secrets.token_hex(20)
        self.tokens[token] = user
        return JSONResponse({"id": next(self.ids), "name": body["name"], "sha1": token}, 201)

    def create_org(self, _request: Request, _user: str, body: Any) -> Response:
        self.orgs.add(body["username"])
        return JSONResponse({"id": next(self.ids), "name": body["username"]}, 201)

    def get_org(self, request: Request, _user: str, _body: Any) -> Response:
        if request.path_params["org"] not in self.orgs:
            raise ApiError(404, "org does not exist")
        return JSONResponse({"id": 2, "name": request.path_params["org"]})

    def create_repo(self, request: Request, _user: str, body: Any) -> Response:
        key = f"{request.path_params['org']}/{body['name']}"
        if key in self.repos:
            raise ApiError(409, "repository already exists")
        self.repos[key] = BareRepo(self.root / f"{key}.git")
        hook = self.root / f"{key}.git" / "hooks" / "pre-receive"
        hook.parent.mkdir(exist_ok=True)
        hook.write_text(PRE_RECEIVE)
        hook.chmod(0o755)
        self.pulls[key], self.collaborators[key], self.protections[key] = {}, set(), []
        self.readers[key] = set()
        return JSONResponse({"id": next(self.ids), "name": body["name"], "full_name": key}, 201)

    def get_repo(self, request: Request, _user: str, _body: Any) -> Response:
        key, _repo = self._repo(request)
        return JSONResponse({"id": 3, "full_name": key, "default_branch": "main"})

    def add_collaborator(self, request: Request, _user: str, body: Any) -> Response:
        key, _repo = self._repo(request)
        name = request.path_params["user"]
        if name not in self.users:
            raise ApiError(422, "user does not exist")
        if (body or {}).get("permission", "write") == "read":
            self.readers[key].add(name)
            self.collaborators[key].discard(name)
        else:
            self.collaborators[key].add(name)
            self.readers[key].discard(name)
        return Response(status_code=204)

    def list_protections(self, request: Request, _user: str, _body: Any) -> Response:
        key, _repo = self._repo(request)
        return JSONResponse(self.protections[key])

    def create_protection(self, request: Request, _user: str, body: Any) -> Response:
        key, _repo = self._repo(request)
        rule = {"rule_name": body["rule_name"], "branch_name": body["rule_name"], **body}
        self.protections[key].append(rule)
        return JSONResponse(rule, 201)

    def get_branch(self, request: Request, _user: str, _body: Any) -> Response:
        _key, repo = self._repo(request)
        sha = repo.head(request.path_params["branch"])
        if sha is None:
            raise ApiError(404, "branch does not exist")
        return JSONResponse({"name": request.path_params["branch"], "commit": {"id": sha}})

    # --- pull requests ---

    def _json(self, repo: BareRepo, pr: PR) -> dict[str, Any]:
        main, head = repo.head("main"), repo.head(pr.head)
        base = repo.merge_base(main, head) if main and head else None
        mergeable = pr.state == "open" and bool(main and head)
        if mergeable and main and head:
            mergeable = repo.try_merge(main, head)[0] is not None
        raw = {
            "id": pr.number,
            "number": pr.number,
            "title": pr.title,
            "body": pr.body,
            "user": self._user(pr.poster),
            "state": pr.state,
            "merged": pr.merged,
            "mergeable": mergeable,
            "merged_at": pr.merged_at,
            "merged_by": self._user(pr.merged_by) if pr.merged_by else None,
            "merge_commit_sha": pr.merge_commit,
            "merge_base": base or "",
            "created_at": pr.created_at,
            "closed_at": pr.closed_at,
            "head": {"ref": pr.head, "label": pr.head, "sha": head or ""},
            "base": {"ref": "main", "label": "main", "sha": main or ""},
        }
        # The spec marks these fields non-nullable: Gitea omits what it does not know.
        return {k: v for k, v in raw.items() if v is not None}

    def list_pulls(self, request: Request, _user: str, _body: Any) -> Response:
        key, repo = self._repo(request)
        q = request.query_params
        state, poster = q.get("state", "open"), q.get("poster")
        prs = [
            p
            for p in sorted(self.pulls[key].values(), key=lambda p: -p.number)
            if (state == "all" or p.state == state) and (not poster or p.poster == poster)
        ]
        page, limit = int(q.get("page", 1)), min(int(q.get("limit", 30)), 50)
        chunk = prs[(page - 1) * limit : page * limit]
        headers = {"X-Total-Count": str(len(prs))}
        return JSONResponse([self._json(repo, p) for p in chunk], headers=headers)

    def create_pull(self, request: Request, user: str, body: Any) -> Response:
        key, repo = self._repo(request)
        if repo.head(body["head"]) is None:
            raise ApiError(404, f"branch {body['head']} does not exist")
        if body["head"] == body.get("base", "main"):
            raise ApiError(422, "head and base are the same")
        for p in self.pulls[key].values():
            if p.head == body["head"] and p.state == "open":
                raise ApiError(409, f"pull request already exists for {body['head']}")
        number = len(self.pulls[key]) + 1
        pr = PR(number, body["title"], body.get("body", ""), user, body["head"], _now())
        self.pulls[key][number] = pr
        return JSONResponse(self._json(repo, pr), 201)

    def get_pull(self, request: Request, _user: str, _body: Any) -> Response:
        _key, repo, pr = self._pr(request)
        return JSONResponse(self._json(repo, pr))

    def edit_pull(self, request: Request, _user: str, body: Any) -> Response:
        _key, repo, pr = self._pr(request)
        if body.get("state") == "closed" and pr.state == "open":
            pr.state, pr.closed_at = "closed", _now()
        return JSONResponse(self._json(repo, pr), 201)

    def pull_diff(self, request: Request, _user: str, _body: Any) -> Response:
        _key, repo, pr = self._pr(request)
        head, main = pr.merge_commit or repo.head(pr.head), repo.head("main")
        base = repo.merge_base(main, head) if main and head else None
        return PlainTextResponse(repo.diff(base, head) if base and head else "")

    def pull_files(self, request: Request, _user: str, _body: Any) -> Response:
        _key, repo, pr = self._pr(request)
        head, main = repo.head(pr.head), repo.head("main")
        base = repo.merge_base(main, head) if main and head else None
        files = repo.changed(base, head) if base and head else []
        rows = [{"filename": f, "status": "changed"} for f in files]
        return JSONResponse(rows, headers={"X-Total-Count": str(len(rows))})

    def list_reviews(self, request: Request, _user: str, _body: Any) -> Response:
        key, repo, pr = self._pr(request)
        self._dismiss_stale(key, repo, pr)
        return JSONResponse(pr.reviews)

    def _rule(self, key: str, name: str) -> bool:
        return any(p.get(name) for p in self.protections[key])

    def _dismiss_stale(self, key: str, repo: BareRepo, pr: PR) -> None:
        """Gitea's `dismiss_stale_approvals`: a push to the head dismisses earlier approvals."""
        if pr.merged or not self._rule(key, "dismiss_stale_approvals"):
            return
        head = repo.head(pr.head) or ""
        for review in pr.reviews:
            if review["state"] == "APPROVED" and review["commit_id"] != head:
                review["dismissed"] = review["stale"] = True

    def create_review(self, request: Request, user: str, body: Any) -> Response:
        _key, repo, pr = self._pr(request)
        state = {"APPROVED": "APPROVED", "REQUEST_CHANGES": "REQUEST_CHANGES"}.get(
            body.get("event", ""), "COMMENT"
        )
        if user == pr.poster and state != "COMMENT":
            raise ApiError(422, "approve your own pull is not allowed")
        review = {
            "id": next(self.ids),
            "user": self._user(user),
            "state": state,
            "body": body.get("body", ""),
            "commit_id": repo.head(pr.head) or "",
            "submitted_at": _now(),
            "dismissed": False,
            "stale": False,
        }
        pr.reviews.append(review)
        return JSONResponse(review)

    def merge_pull(self, request: Request, user: str, body: Any) -> Response:
        key, repo, pr = self._pr(request)
        if pr.merged:
            raise ApiError(405, "pull request has already been merged")
        head = repo.head(pr.head)
        if body.get("head_commit_id") and body["head_commit_id"] != head:
            raise ApiError(409, "head out of date")
        if body.get("force_merge") and user != "admin":
            raise ApiError(405, "only admins may force a merge")
        self._dismiss_stale(key, repo, pr)
        latest = {}
        for r in pr.reviews:
            if r["state"] != "COMMENT" and not r["dismissed"]:
                latest[r["user"]["login"]] = r["state"]
        need = max((p.get("required_approvals", 0) for p in self.protections[key]), default=0)
        approvers = [name for name, state in latest.items() if state == "APPROVED"]
        rejected = "REQUEST_CHANGES" in latest.values()
        if not body.get("force_merge"):
            if len(approvers) < need:
                raise ApiError(405, "Does not have enough approvals")
            if rejected and self._rule(key, "block_on_rejected_reviews"):
                raise ApiError(405, "There are requested changes")
        main = repo.head("main")
        if head is None or main is None or repo.try_merge(main, head)[0] is None:
            raise ApiError(405, "Please try again later")
        sha = repo.merge("main", head, f"Merge pull request #{pr.number}: {pr.title}")
        pr.state, pr.merged, pr.merged_at, pr.merged_by = "closed", True, _now(), user
        pr.merge_commit, pr.closed_at = sha, pr.merged_at
        return Response(status_code=200)

    def compare(self, request: Request, _user: str, _body: Any) -> Response:
        _key, repo = self._repo(request)
        base, _, head = request.path_params["basehead"].partition("...")
        commits = [
            {"sha": c, "files": [{"filename": f} for f in repo.commit_files(c)]}
            for c in repo.commits(base, head)
        ]
        return JSONResponse({"commits": commits, "total_commits": len(commits)})

    # --- git's smart HTTP ---

    def _git_user(self, request: Request) -> str | None:
        try:
            return self._auth(request) if request.headers.get("authorization") else None
        except ApiError:
            return None

    async def serve_git(self, request: Request) -> Response:
        """`git http-backend` for one repository, as the basic-auth user (like Gitea's)."""
        owner, name, path = (request.path_params[k] for k in ("owner", "repo", "path"))
        key = f"{owner}/{name}"
        user = self._git_user(request)
        if user is None:
            return PlainTextResponse(
                "Unauthorized\n", 401, headers={"WWW-Authenticate": 'Basic realm="Gitea"'}
            )
        with self.lock:
            if key not in self.repos or ".." in path.split("/"):
                return PlainTextResponse("Not found\n", 404)
            writer = user == "admin" or user in self.collaborators[key]
            reader = writer or user in self.readers[key]
            protected = " ".join(
                str(r.get("rule_name") or r.get("branch_name"))
                for r in self.protections[key]
                if not r.get("enable_push")
            )
        pushing = "git-receive-pack" in (path, request.query_params.get("service"))
        if not reader or (pushing and not writer):
            if pushing:
                self.pushes.append((user, key, 403))
            return PlainTextResponse(f"User {user} may not access {key}\n", 403)
        git_dir = self.repos[key].path
        env = _cgi_env(git_dir, request, path, Worker(0, user), GitLimits())
        env["STANDIN_PROTECTED"] = protected
        proc = await asyncio.create_subprocess_exec(
            "git", "http-backend",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        assert proc.stdin and proc.stdout and proc.stderr
        feeder = asyncio.create_task(_feed(request, proc.stdin))
        errors = asyncio.create_task(proc.stderr.read())
        status, headers, first = await _read_headers(proc.stdout)
        if path == "git-receive-pack":
            self.pushes.append((user, key, status))

        async def body() -> AsyncIterator[bytes]:
            try:
                if first:
                    yield first
                while chunk := await proc.stdout.read(64 * 1024):  # type: ignore[union-attr]
                    yield chunk
            finally:
                await _reap(proc, feeder, errors)

        return _CGIResponse(status, headers, body())
