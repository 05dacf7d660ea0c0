"""The hub's edge: what every request is checked for before any route sees it.

A pure ASGI middleware (see swarm.hub.timing for why not BaseHTTPMiddleware):

- a body larger than the limit is refused from its Content-Length before a byte of it is read,
  and a body without one (chunked) is counted as it streams and refused once it passes the limit;
- a JSON body may not hold NUL, a lone surrogate, NaN or Infinity anywhere (PostgreSQL cannot
  store NUL, no UTF-8 encoder can write a lone surrogate, and JSON has no NaN): 422 on both
  engines, for every field, instead of a 500 somewhere later;
- a query string or path may not hold NUL.

Git's smart HTTP (`/git/...`) streams packs of its own size limit and is only counted here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import Path, Query
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Ids are 64-bit signed integers on both engines: a larger one can name nothing (422, not 500).
MAX_ID = 2**63 - 1
IdPath = Annotated[int, Path(ge=0, le=MAX_ID, description="An id (0 … 2^63-1)")]
IdQuery = Annotated[int | None, Query(ge=0, le=MAX_ID, description="An id (0 … 2^63-1)")]
TimeQuery = Annotated[
    float | None, Query(allow_inf_nan=False, description="Unix time in seconds (finite)")
]
COUNT_MAX = 2**31 - 1  # token counts, steps, test counts: INTEGER columns (32-bit on PostgreSQL)

_SUSPECT = (b"\\u", b"NaN", b"Infinity")


class BadText(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise BadText(f"the JSON holds {name}, which JSON does not allow: send a finite number")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def text_problem(text: str) -> str | None:
    """Why this text cannot be stored, or None."""
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which text cannot hold: remove it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return (
            "contains a lone surrogate (e.g. \\ud800), which is not text: send valid UTF-16 pairs"
        )
    return None


def body_problem(body: bytes) -> str | None:
    """Why this JSON body cannot be accepted, or None (a body that is not JSON is the route's)."""
    if not any(mark in body for mark in _SUSPECT):
        return None  # the common case: no escapes and no constants, nothing to parse twice
    try:
        parsed = json.loads(body, parse_constant=_reject_constant)
    except BadText as exc:
        return str(exc)
    except ValueError:
        return None  # not JSON: the route says what is wrong with it
    for text in _strings(parsed):
        problem = text_problem(text)
        if problem:
            return f"a text in the body {problem}"
    return None


def _answer(status: int, kind: str, message: str) -> list[Message]:
    payload = json.dumps({"error": message, "kind": kind}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    if status == 413:
        headers.append((b"connection", b"close"))
    return [
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": payload},
    ]


class TooLarge(Exception):
    pass


class EdgeGuard:
    """Refuses oversized bodies unread and text no engine can store (see the module's doc)."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, git_max_body_bytes: int) -> None:
        self.app = app
        self.max_body = max_body_bytes
        self.git_max_body = git_max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query: bytes = scope.get("query_string", b"")
        if "\x00" in scope["path"] or b"%00" in query or b"\x00" in query:
            await self._send(
                send, 422, "InvalidInput", "the URL contains a NUL character (%00): remove it"
            )
            return
        git = scope["path"].startswith("/git/")
        limit = self.git_max_body if git else self.max_body
        length = _content_length(scope)
        if length is not None and length > limit:
            await self._send(send, 413, "TooLarge", _too_large(length, limit, git))
            return
        if git:
            await self.app(scope, _counting(receive, limit), send)
            return
        try:
            body = await _read(receive, limit)
        except TooLarge:
            await self._send(send, 413, "TooLarge", _too_large(None, limit, git))
            return
        problem = body_problem(body) if body else None
        if problem:
            await self._send(send, 422, "InvalidInput", f"bad request: {problem}")
            return
        await self.app(scope, _replay(body, receive), send)

    @staticmethod
    async def _send(send: Send, status: int, kind: str, message: str) -> None:
        for part in _answer(status, kind, message):
            await send(part)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _too_large(length: int | None, limit: int, git: bool) -> str:
    size = f"{length:,} bytes" if length is not None else "more than that"
    what = "a git push" if git else "a request body"
    return (
        f"{what} may be at most {limit:,} bytes; this one is {size}. "
        "Send less (split it, or keep large data out of the hub)"
    )


async def _read(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: the disconnect, when it comes

    return replay


def _counting(receive: Receive, limit: int) -> Receive:
    """A git push without Content-Length: cut off once it passes the limit."""
    size = 0

    async def counted() -> Message:
        nonlocal size
        message = await receive()
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > limit:
                return {"type": "http.disconnect"}
        return message

    return counted
