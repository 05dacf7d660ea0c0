"""Run a stand-in ASGI app for a synchronous httpx client: in-process, or on loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio.from_thread
import httpx
import uvicorn


class AppTransport(httpx.BaseTransport):
    """A sync transport that calls an ASGI app in-process (httpx.ASGITransport on a portal)."""

    def __init__(self, app: Any) -> None:
        self._portal_cm = anyio.from_thread.start_blocking_portal()
        self.portal = self._portal_cm.__enter__()
        self.inner = httpx.ASGITransport(app=app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()

        async def call() -> httpx.Response:
            response = await self.inner.handle_async_request(request)
            content = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=content)

        return self.portal.call(call)

    def close(self) -> None:
        self._portal_cm.__exit__(None, None, None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def loopback(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn on 127.0.0.1 in a thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class Validated:
    """ASGI middleware: every API exchange a stand-in serves (to any client, e.g. a hub in
    another process) is checked against the server's spec; mismatches are collected in
    `errors` (raising would only show up as a 500 in the client)."""

    def __init__(self, app: Any, check: Any, prefix: str = "/api/") -> None:
        self.app = app
        self.check = check  # a contract.spec.SpecCheck
        self.prefix = prefix
        self.errors: list[str] = []
        self.count = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        status, headers, chunks = 0, [], []

        async def capture(message: Any) -> None:
            nonlocal status, headers
            if message["type"] == "http.response.start":
                status, headers = message["status"], message.get("headers", [])
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
            await send(message)

        await self.app(scope, replay, capture)
        query = scope.get("query_string", b"").decode()
        request = httpx.Request(
            scope["method"],
            f"http://standin{scope['path']}" + (f"?{query}" if query else ""),
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
            content=body,
        )
        response = httpx.Response(
            status,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers],
            content=b"".join(chunks),
            request=request,
        )
        self.count += 1
        try:
            self.check.request(request)
            self.check.response(request, response)
        except Exception as exc:  # every mismatch is reported by the test
            self.errors.append(f"{scope['method']} {scope['path']} -> {status}: {exc!r}"[:2000])
