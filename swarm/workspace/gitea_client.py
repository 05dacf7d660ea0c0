"""A thin, throttled httpx client for the Gitea REST API (v1), with admin helpers for bootstrap."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from swarm.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    SwarmError,
    Unauthorized,
    Unavailable,
)

MAX_PAGE = 50  # Gitea's default API MAX_RESPONSE_ITEMS; a larger `limit` is silently capped


class TokenBucket:
    """Client-side throttle shared by every call of one adapter (Gitea has no rate limiting)."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.sleep = sleep
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def take(self) -> float:
        """Wait for one token; return the seconds waited."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            now = self.clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            self._tokens -= 1
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait:
            self.sleep(wait)
        return wait


def translate(response: httpx.Response) -> SwarmError:
    """Map a Gitea error answer onto the project's exception tree."""
    try:
        detail = response.json().get("message") or response.text
    except ValueError:
        detail = response.text
    text = f"Gitea answered {response.status_code} to {response.request.method} "
    text += f"{response.request.url.path}: {detail}".strip()
    kinds: dict[int, type[SwarmError]] = {
        400: InvalidInput,
        401: Unauthorized,
        403: Forbidden,
        404: NotFound,
        405: Conflict,
        409: Conflict,
        412: Conflict,
        422: InvalidInput,
        423: Conflict,
    }
    error = kinds.get(response.status_code, Unavailable)(text)
    error.status_code = response.status_code  # type: ignore[attr-defined]
    return error


def status_of(error: SwarmError) -> int | None:
    """The Gitea status a translated error came from, if any."""
    return getattr(error, "status_code", None)


class GiteaClient:
    """Admin-token client; `sudo=` makes a call act as that user (Gitea honours `Sudo`)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        transport: httpx.BaseTransport | None = None,
        rate: float = 50.0,
        burst: int = 20,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.bucket = TokenBucket(rate, burst)
        self.http = httpx.Client(
            base_url=self.base_url + "/api/v1",
            headers={"Authorization": f"token {token}", "Accept": "application/json"},
            transport=transport,
            timeout=timeout,
        )

    def close(self) -> None:
        self.http.close()

    def send(
        self,
        method: str,
        path: str,
        *,
        sudo: str | None = None,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        auth: tuple[str, str] | None = None,
        ok: tuple[int, ...] = (),
    ) -> httpx.Response:
        """One call; errors other than the statuses in `ok` become swarm errors."""
        self.bucket.take()
        headers = {"Sudo": sudo} if sudo else {}
        if auth is not None:
            headers["Authorization"] = httpx.BasicAuth(*auth)._auth_header
        try:
            response = self.http.request(method, path, json=json, params=params, headers=headers)
        except httpx.HTTPError as exc:
            raise Unavailable(f"cannot reach Gitea at {self.base_url}: {exc}") from exc
        if response.is_success or response.status_code in ok:
            return response
        raise translate(response)

    def get(self, path: str, **kw: Any) -> Any:
        return self.send("GET", path, **kw).json()

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        response = self.send("POST", path, json=body, **kw)
        return response.json() if response.content else None

    def paged(
        self, path: str, params: Mapping[str, Any] | None = None, *, limit: int | None = None
    ) -> Iterator[Any]:
        """Every item of a list endpoint, following `page`/`limit` until the last page."""
        page, seen = 1, 0
        while True:
            query = {**(params or {}), "page": page, "limit": MAX_PAGE}
            response = self.send("GET", path, params=query)
            items = response.json() or []
            for item in items:
                yield item
                seen += 1
                if limit is not None and seen >= limit:
                    return
            total = response.headers.get("x-total-count")
            has_next = 'rel="next"' in response.headers.get("link", "")
            if not items or (total is not None and seen >= int(total)):
                return
            if total is None and not has_next and len(items) < MAX_PAGE:
                return
            page += 1

    # --- administration (bootstrap and first use of a worker) ---

    def user_exists(self, username: str) -> bool:
        return self.send("GET", f"/users/{username}", ok=(404,)).status_code == 200

    def ensure_user(self, username: str, password: str, email: str | None = None) -> None:
        """Create a user (idempotent) that never has to change its password."""
        if self.user_exists(username):
            return
        body = {
            "username": username,
            "password": password,
            "email": email or f"{username}@swarm.invalid",
            "must_change_password": False,
        }
        response = self.send("POST", "/admin/users", json=body, ok=(422,))
        if response.status_code == 422 and not self.user_exists(username):
            raise translate(response)

    def create_token(self, username: str, password: str, name: str) -> str:
        """A new access token for `username` (Gitea requires the user's basic auth here)."""
        body = {"name": name, "scopes": ["write:repository", "write:user", "read:organization"]}
        created = self.post(f"/users/{username}/tokens", body, auth=(username, password))
        return str(created["sha1"])

    def ensure_org(self, org: str) -> None:
        if self.send("GET", f"/orgs/{org}", ok=(404,)).status_code == 404:
            self.post("/orgs", {"username": org, "visibility": "private"})

    def ensure_repo(self, owner: str, repo: str) -> bool:
        """Create an empty repository in organisation `owner`; True if it was created."""
        if self.send("GET", f"/repos/{owner}/{repo}", ok=(404,)).status_code == 200:
            return False
        self.post(
            f"/orgs/{owner}/repos",
            {"name": repo, "private": True, "default_branch": "main", "auto_init": False},
        )
        return True

    def add_collaborator(
        self, owner: str, repo: str, username: str, permission: str = "write"
    ) -> None:
        self.send(
            "PUT",
            f"/repos/{owner}/{repo}/collaborators/{username}",
            json={"permission": permission},
        )

    def branch_exists(self, owner: str, repo: str, branch: str) -> bool:
        path = f"/repos/{owner}/{repo}/branches/{branch}"
        return self.send("GET", path, ok=(404,)).status_code == 200

    def protect_main(self, owner: str, repo: str, *, required_approvals: int = 0) -> None:
        """Nobody pushes to main; merges go through the API (idempotent)."""
        rules = self.get(f"/repos/{owner}/{repo}/branch_protections")
        if any(r.get("rule_name") == "main" or r.get("branch_name") == "main" for r in rules):
            return
        self.post(
            f"/repos/{owner}/{repo}/branch_protections",
            {
                "rule_name": "main",
                "enable_push": False,
                "required_approvals": required_approvals,
                "block_on_outdated_branch": False,
                "dismiss_stale_approvals": True,  # an approval is for the head it reviewed
                "block_on_rejected_reviews": True,  # requested changes block until approved
            },
        )
