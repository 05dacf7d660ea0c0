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
import math
import os
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from swarm.diskfull import text_says_full
from swarm.errors import SwarmError
from swarm.registry import Worker

log = logging.getLogger(__name__)

CHUNK = 64 * 1024
SEEN = 4096  # bytes of a push's answer kept to tell a full disk from it
PKT_PREFIX = re.compile(r"^[0-9a-f]{4}[\x01-\x03]?")
HEADER_LIMIT = 64 * 1024

# POSIX sh, so a push costs no interpreter start-up. git shows the hook's stderr as "remote: ...".
PRE_RECEIVE = r"""#!/bin/sh
# Installed by swarm: a worker pushes only to refs/heads/<its name>/...; main moves only by merge.
# Limits come from the hub's environment (0 or unset: none): the largest file, branches per
# worker, and the repository's disk quota. git shows each refusal as "remote: swarm: ...".
status=0
if [ -z "$REMOTE_USER" ]; then
    echo "swarm: refused: push through the hub with your token (no worker identity given)" >&2
    exit 1
fi
if [ "$REMOTE_USER" = operator ]; then
    echo "swarm: refused: the operator token clones and fetches; it never pushes" >&2
    exit 1
fi
zero=0000000000000000000000000000000000000000
max_blob=${SWARM_GIT_MAX_BLOB_BYTES:-0}
max_refs=${SWARM_GIT_MAX_REFS:-0}
quota_kb=$(( ${SWARM_GIT_QUOTA_BYTES:-0} / 1024 ))
created=0
while read -r old new ref; do
    case "$ref" in
        "refs/heads/$REMOTE_USER/"?*) ;;
        refs/heads/main)
            echo "swarm: refused $ref: nobody pushes to main. Push to" \
                 "refs/heads/$REMOTE_USER/<topic>, open a PR (sw pr open) and merge it." >&2
            status=1; continue ;;
        refs/tags/*)
            echo "swarm: refused $ref: tags are not allowed; push to" \
                 "refs/heads/$REMOTE_USER/<topic>." >&2
            status=1; continue ;;
        refs/heads/*/*)
            echo "swarm: refused $ref: that branch belongs to another worker; push to" \
                 "refs/heads/$REMOTE_USER/<topic>" \
                 "(git push origin HEAD:$REMOTE_USER/<topic>)." >&2
            status=1; continue ;;
        *)
            echo "swarm: refused $ref: you push only to refs/heads/$REMOTE_USER/<topic>" \
                 "(git push origin HEAD:$REMOTE_USER/<topic>)." >&2
            status=1; continue ;;
    esac
    if [ "$new" = "$zero" ]; then
        created=$((created - 1))
        continue
    fi
    [ "$old" = "$zero" ] && created=$((created + 1))
    if [ "$max_blob" -gt 0 ]; then
        big=$(git rev-list --objects "$new" --not --all |
              git cat-file --batch-check='%(objecttype) %(objectsize) %(rest)' |
              awk -v max="$max_blob" \
                  '$1 == "blob" && $2 > max { print $3 " (" $2 " bytes)"; exit }')
        if [ -n "$big" ]; then
            echo "swarm: refused $ref: the file $big is larger than $max_blob bytes, the" \
                 "limit on one file (SWARM_GIT_MAX_BLOB_BYTES); keep large files out of git" >&2
            status=1
        fi
    fi
done
if [ $status -eq 0 ] && [ "$max_refs" -gt 0 ]; then
    have=$(git for-each-ref --format=x "refs/heads/$REMOTE_USER/" | wc -l)
    if [ $((have + created)) -gt "$max_refs" ]; then
        echo "swarm: refused: this push would leave you $((have + created)) branches; the limit" \
             "is $max_refs per worker (SWARM_GIT_MAX_REFS_PER_WORKER). Delete merged ones:" \
             "git push origin --delete $REMOTE_USER/<topic>" >&2
        status=1
    fi
fi
if [ $status -eq 0 ] && [ "$quota_kb" -gt 0 ]; then
    # objects/ holds this push's quarantine too: the size the repository would have.
    used=$(du -sk objects | cut -f1)
    if [ "$used" -gt "$quota_kb" ]; then
        echo "swarm: refused: the repository would use $used KiB, past its quota of" \
             "$quota_kb KiB (SWARM_GIT_REPO_QUOTA_BYTES); the operator must raise it" >&2
        status=1
    fi
fi
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


@dataclass(frozen=True)
class GitLimits:
    """What one push may bring (0: no limit); see docs/security.md, "The hub's rules"."""

    max_push_bytes: int = 0
    max_blob_bytes: int = 0
    max_refs_per_worker: int = 0
    repo_quota_bytes: int = 0

    def env(self) -> dict[str, str]:
        """For the pre-receive hook (http-backend passes its environment down to it)."""
        return {
            "SWARM_GIT_MAX_BLOB_BYTES": str(self.max_blob_bytes),
            "SWARM_GIT_MAX_REFS": str(self.max_refs_per_worker),
            "SWARM_GIT_QUOTA_BYTES": str(self.repo_quota_bytes),
        }


def _cgi_env(
    git_dir: Path, request: Request, path: str, worker: Worker, limits: GitLimits
) -> dict[str, str]:
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
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "receive.autogc",
        "GIT_CONFIG_VALUE_0": "false",
        # git itself refuses a larger pack, with "pack exceeds maximum allowed size" in its output.
        "GIT_CONFIG_KEY_1": "receive.maxInputSize",
        "GIT_CONFIG_VALUE_1": str(limits.max_push_bytes),
        **limits.env(),
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
    workspace: ServesGit,
    authenticate: Callable[[str], Worker],
    *,
    prefix: str = "/git",
    limits: GitLimits | None = None,
    throttle: Callable[[Worker], float] | None = None,
    on_full: Callable[[str], None] | None = None,
) -> APIRouter:
    """`throttle(worker)` answers 0 to let a git operation through, else the seconds to wait;
    `on_full(what)` hears of a git operation that failed for lack of space."""
    limits = limits or GitLimits()
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
        # One git operation (clone, fetch, push) starts with one info/refs request: count those.
        if throttle is not None and path == "info/refs":
            wait = throttle(worker)
            if wait > 0:
                return PlainTextResponse(
                    f"swarm: too many git operations from {worker.name}; try again in "
                    f"{math.ceil(wait)} s (SWARM_RATE_GIT_PER_MINUTE)\n",
                    status_code=429,
                    headers={"Retry-After": str(math.ceil(wait))},
                )
        proc = await asyncio.create_subprocess_exec(
            "git", "http-backend",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=_cgi_env(git_dir, request, path, worker, limits),
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

        # receive-pack tells the client why a push failed in its answer, not on stderr.
        watch = on_full is not None and path.endswith("git-receive-pack")

        async def body() -> AsyncIterator[bytes]:
            seen = b""  # the answer's end so far, for a full disk it reports
            try:
                if first:
                    yield first
                    seen = first[-SEEN:]
                while chunk := await proc.stdout.read(CHUNK):  # type: ignore[union-attr]
                    yield chunk
                    if watch:
                        seen = (seen + chunk)[-SEEN:]
            finally:
                said = await _reap(proc, feeder, errors) + seen.decode("latin-1")
                if on_full is not None and text_says_full(said):
                    why = next(line for line in said.splitlines()[::-1] if text_says_full(line))
                    why = PKT_PREFIX.sub("", why.strip())  # a pkt-line's length and band
                    on_full(f"a push by {worker.name} failed: {why[-300:]}")

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
) -> str:
    """Wait for http-backend to end; its stderr."""
    if proc.returncode is None:
        # A client that went away mid-transfer must not leave the subprocess behind.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), timeout=30)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    feeder.cancel()
    stderr = (await errors).decode(errors="replace")
    if stderr.strip():
        log.info("git http-backend: %s", stderr.strip())
    return stderr
