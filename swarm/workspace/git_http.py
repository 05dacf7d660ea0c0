"""Git's smart HTTP through the hub: `git http-backend` as a CGI subprocess behind worker tokens.

The hub authenticates the token and passes the worker's name as REMOTE_USER; the bare
repository's pre-receive hook then refuses any ref outside `refs/heads/<worker>/`, so nobody
pushes to main, tags, or another worker's branches. Bodies stream both ways (pushes can be large).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Protocol

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from swarm.errors import SwarmError
from swarm.registry import Worker

log = logging.getLogger(__name__)

CHUNK = 64 * 1024
HEADER_LIMIT = 64 * 1024

# POSIX sh, so a push costs no interpreter start-up. git shows the hook's stderr as "remote: ...".
PRE_RECEIVE = r"""#!/bin/sh
# Installed by swarm: a worker pushes only to refs/heads/<its name>/...; main moves only by merge.
status=0
if [ -z "$REMOTE_USER" ]; then
    echo "swarm: refused: push through the hub with your token (no worker identity given)" >&2
    exit 1
fi
while read -r old new ref; do
    case "$ref" in
        "refs/heads/$REMOTE_USER/"?*) continue ;;
        refs/heads/main)
            echo "swarm: refused $ref: nobody pushes to main. Push to" \
                 "refs/heads/$REMOTE_USER/<topic>, open a PR (sw pr open) and merge it." >&2 ;;
        refs/tags/*)
            echo "swarm: refused $ref: tags are not allowed; push to" \
                 "refs/heads/$REMOTE_USER/<topic>." >&2 ;;
        refs/heads/*/*)
            echo "swarm: refused $ref: that branch belongs to another worker; push to" \
                 "refs/heads/$REMOTE_USER/<topic>" \
                 "(git push origin HEAD:$REMOTE_USER/<topic>)." >&2 ;;
        *)
            echo "swarm: refused $ref: you push only to refs/heads/$REMOTE_USER/<topic>" \
                 "(git push origin HEAD:$REMOTE_USER/<topic>)." >&2 ;;
    esac
    status=1
done
exit $status
"""


def install_hooks(git_dir: Path) -> None:
    """Write the pre-receive hook (again on every start, so an upgrade takes effect)."""
    hooks = git_dir / "hooks"
    hooks.mkdir(exist_ok=True)
    hook = hooks / "pre-receive"
    tmp = hooks / "pre-receive.tmp"
    tmp.write_text(PRE_RECEIVE)
    tmp.chmod(0o755)
    tmp.replace(hook)


def token_from_headers(authorization: str | None) -> str | None:
    """The token from `Bearer <token>` or from basic auth's password (the user name is ignored)."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip() or None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    return None


def _challenge(message: str) -> Response:
    # The challenge makes git retry with the credentials of the URL or a credential helper.
    return PlainTextResponse(
        message + "\n", status_code=401, headers={"WWW-Authenticate": 'Basic realm="swarm"'}
    )


def _cgi_env(git_dir: Path, request: Request, path: str, worker: Worker) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "GIT_PROJECT_ROOT": str(git_dir.parent),
        "GIT_HTTP_EXPORT_ALL": "1",
        "REMOTE_USER": worker.name,
        "REMOTE_ADDR": request.client.host if request.client else "",
        "PATH_INFO": f"/{git_dir.name}/{path}",
        "QUERY_STRING": request.url.query,
        "REQUEST_METHOD": request.method,
        "CONTENT_TYPE": request.headers.get("content-type", ""),
        # No `git gc --auto` after a push: its `pack-refs` locks every ref, main included, and
        # a merge moving main at that moment failed ("failed to lock refs/heads/main.lock"; seen
        # at 1,024 workers, whose 1,024 branches passed gc's loose-ref threshold).
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "receive.autogc",
        "GIT_CONFIG_VALUE_0": "false",
    }
    # Without CONTENT_LENGTH (a chunked push) http-backend reads the body to its end.
    optional = {
        "CONTENT_LENGTH": "content-length",
        "HTTP_CONTENT_ENCODING": "content-encoding",  # http-backend inflates gzip itself
        "HTTP_GIT_PROTOCOL": "git-protocol",
    }
    for name, header in optional.items():
        if header in request.headers:
            env[name] = request.headers[header]
    return env


async def _read_headers(stdout: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """Parse the CGI header block; returns status, headers and the body bytes already read."""
    buffer = b""
    while True:
        for separator in (b"\r\n\r\n", b"\n\n"):
            head, found, rest = buffer.partition(separator)
            if found:
                status, headers = 200, {}
                for line in head.decode("latin-1").splitlines():
                    name, _, value = line.partition(":")
                    if name.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif name:
                        headers[name.strip()] = value.strip()
                return status, headers, rest
        chunk = await stdout.read(CHUNK)
        if not chunk or len(buffer) > HEADER_LIMIT:
            raise RuntimeError(f"git http-backend gave no CGI headers: {buffer[:200]!r}")
        buffer += chunk


class ServesGit(Protocol):
    @property
    def git_dir(self) -> Path: ...


def git_router(
    workspace: ServesGit, authenticate: Callable[[str], Worker], *, prefix: str = "/git"
) -> APIRouter:
    """Routes serving `<prefix>/<repo dir name>/...` (e.g. /git/workspace.git) with http-backend."""
    router = APIRouter(prefix=prefix)
    git_dir = workspace.git_dir
    repo_name = git_dir.name

    # Git's own protocol, not part of the JSON API (GET /v1/workspace gives the clone URL); in
    # the OpenAPI schema one route with two methods would be one operation id twice.
    @router.api_route(
        f"/{repo_name}/{{path:path}}", methods=["GET", "POST"], include_in_schema=False
    )
    async def serve(request: Request, path: str) -> Response:
        token = token_from_headers(request.headers.get("authorization"))
        if token is None:
            return _challenge("swarm: give your worker token (Bearer, or as the password)")
        try:
            worker = await run_in_threadpool(authenticate, token)
        except SwarmError as exc:
            return _challenge(f"swarm: {exc.message}")
        if ".." in path.split("/"):
            return PlainTextResponse("swarm: bad path\n", status_code=400)
        proc = await asyncio.create_subprocess_exec(
            "git", "http-backend",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=_cgi_env(git_dir, request, path, worker),
        )  # fmt: skip
        assert proc.stdin and proc.stdout and proc.stderr
        feeder = asyncio.create_task(_feed(request, proc.stdin))
        errors = asyncio.create_task(proc.stderr.read())
        try:
            status, headers, first = await _read_headers(proc.stdout)
        except Exception:
            feeder.cancel()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            log.error("git http-backend failed: %s", (await errors).decode(errors="replace"))
            raise

        async def body() -> AsyncIterator[bytes]:
            try:
                if first:
                    yield first
                while chunk := await proc.stdout.read(CHUNK):  # type: ignore[union-attr]
                    yield chunk
            finally:
                await _reap(proc, feeder, errors)

        return _CGIResponse(status, headers, body())

    return router


class _CGIResponse(Response):
    """Streams http-backend's answer while the request body may still be arriving.

    Starlette's StreamingResponse also reads the request channel to notice a disconnect, which
    would steal the chunks of a push that http-backend answers before it has read them all.
    """

    def __init__(self, status: int, headers: dict[str, str], body: AsyncIterator[bytes]) -> None:
        self.status_code = status
        self.background = None
        # Set by hand: Response.__init__ would add "content-length: 0" for an empty body.
        self.raw_headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
        ]
        self.chunks = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _feed(request: Request, stdin: asyncio.StreamWriter) -> None:
    """Stream the request body into http-backend without holding it in memory."""
    try:
        async for chunk in request.stream():
            if chunk:
                stdin.write(chunk)
                await stdin.drain()
    except (BrokenPipeError, ConnectionResetError, ClientDisconnect):
        pass  # the client went away, or http-backend stopped reading (its answer says why)
    finally:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.close()


async def _reap(
    proc: asyncio.subprocess.Process, feeder: asyncio.Task[None], errors: asyncio.Task[bytes]
) -> None:
    if proc.returncode is None:
        # A client that went away mid-transfer must not leave the subprocess behind.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), timeout=30)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    feeder.cancel()
    stderr = await errors
    if stderr.strip():
        log.info("git http-backend: %s", stderr.decode(errors="replace").strip())
