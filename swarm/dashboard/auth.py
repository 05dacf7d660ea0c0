"""Who may read the dashboard's JSON: the read-only viewer policy.

Reading is open to loopback clients (a person on the hub's machine) that name the hub by its own
host name (not a DNS-rebinding page's), unless `SWARM_VIEWER_TOKEN` is set; otherwise a request
must carry, as a bearer token, the viewer token, the operator token or any worker's token.
Writing never goes through these routes: the page posts to the operator routes of the API
(`/v1/operator/...`) with the operator token."""

from __future__ import annotations

import ipaddress
import os
import secrets

from fastapi import Request

from swarm.bootstrap import Runtime
from swarm.errors import Forbidden, Unauthorized

VIEWER_TOKEN_ENV = "SWARM_VIEWER_TOKEN"


def _same(a: str, b: str) -> bool:
    return secrets.compare_digest(a.encode(), b.encode())


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _loopback(request: Request) -> bool:
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "testclient"  # Starlette's in-process test client


def token_role(runtime: Runtime, token: str | None) -> str | None:
    """`operator`, `viewer`, `worker`, or None for a missing or unknown token."""
    if not token:
        return None
    if _same(token, runtime.operator_token):
        return "operator"
    viewer = os.environ.get(VIEWER_TOKEN_ENV)
    if viewer and _same(token, viewer):
        return "viewer"
    try:
        runtime.registry.authenticate(token)
    except Unauthorized:
        return None
    return "worker"


LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def _host_name(request: Request) -> str:
    host = request.headers.get("host", "").strip().lower()
    if host.startswith("["):  # [::1]:8765
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def own_host(request: Request) -> bool:
    """Whether the Host header names the hub itself. A page on another site that rebinds its
    DNS name to 127.0.0.1 reaches the hub from loopback, but its requests carry its own name."""
    runtime: Runtime = request.app.state.runtime
    allowed = LOCAL_NAMES | {runtime.settings.host.lower()} | runtime.settings.allowed_host_names()
    if request.client and request.client.host == "testclient":
        allowed.add("testserver")  # Starlette's in-process test client
    return _host_name(request) in allowed


def open_to(request: Request) -> bool:
    """Whether this client may read without a token: on loopback, asking for the hub by its own
    name (see own_host), and no viewer token set."""
    return not os.environ.get(VIEWER_TOKEN_ENV) and _loopback(request) and own_host(request)


async def viewer(request: Request) -> None:
    """A dependency: refuse a reader who is neither trusted by address nor by token."""
    runtime: Runtime = request.app.state.runtime
    if token_role(runtime, _bearer(request)) is None and not open_to(request):
        raise Unauthorized(
            "the dashboard needs a token here: enter the viewer token "
            f"(${VIEWER_TOKEN_ENV}), the operator token or a worker token"
        )


def role_of(request: Request) -> str | None:
    runtime: Runtime = request.app.state.runtime
    return token_role(runtime, _bearer(request))


async def no_worker(request: Request) -> None:
    """A dependency for what a worker's token must not open: other workers' direct messages."""
    if role_of(request) == "worker":
        raise Forbidden(
            "direct-message threads are for people (viewer or operator token); a worker reads "
            "its own DMs with sw inbox"
        )
